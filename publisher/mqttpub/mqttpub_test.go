package mqttpub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/mqttpub"
	"github.com/outboxkit/outbox/publisher/publishertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const prefix = "outbox/"

// connect connects a client to rawURL with fast reconnects, disconnected when t ends.
func connect(t *testing.T, rawURL string) mqtt.Client {
	t.Helper()
	o, err := mqttpub.ClientOptions(rawURL)
	require.NoError(t, err)
	o.SetConnectRetryInterval(50 * time.Millisecond).SetMaxReconnectInterval(200 * time.Millisecond)
	c := mqtt.NewClient(o)
	tok := c.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second), "connect timed out")
	if err := tok.Error(); err != nil {
		testsvc.Unavailable(t, "Mosquitto", err)
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// subscribe returns a Collector fed by a QoS 1 subscription to topic.
func subscribe(t *testing.T, topic string) *publishertest.Collector {
	t.Helper()
	c := connect(t, testsvc.MQTTURL(t))
	var out publishertest.Collector
	tok := c.Subscribe(topic, 1, func(_ mqtt.Client, msg mqtt.Message) {
		var e mqttpub.Envelope
		if err := json.Unmarshal(msg.Payload(), &e); err != nil {
			t.Errorf("bad envelope on %s: %v", msg.Topic(), err)
			return
		}
		out.Add(publishertest.Received{MessageID: e.ID, Key: e.Key, Topic: e.Topic, Headers: e.Headers,
			Payload: e.Body(), ContentType: e.ContentType})
	})
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	return &out
}

func newPublisher(t *testing.T, c mqtt.Client, opts ...mqttpub.Option) *mqttpub.Publisher {
	t.Helper()
	p, err := mqttpub.New(c, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestSuite runs the shared publisher conformance suite on the real Mosquitto.
func TestSuite(t *testing.T) {
	rawURL := testsvc.MQTTURL(t)
	const limit = 1 << 20
	opts := []mqttpub.Option{mqttpub.WithTopicPrefix(prefix), mqttpub.WithMaxMessageSize(limit)}
	publishertest.Run(t, publishertest.Features{
		OrderedPerKey:   true, // one topic, one connection, QoS 1 in order
		Headers:         true, // in the envelope
		ContentType:     true, // in the envelope, with payload_base64
		MaxPayload:      limit - 4096,
		TooLargePayload: limit + 1, // refused by WithMaxMessageSize
	}, publishertest.Harness{
		New: func(t *testing.T) publishertest.Dest {
			topic := testsvc.Name(t)
			return publishertest.Dest{
				Publisher: newPublisher(t, connect(t, rawURL), opts...),
				Receiver:  subscribe(t, prefix+topic),
				Topic:     topic,
			}
		},
		Outage: func(t *testing.T) publishertest.OutageDest {
			topic := testsvc.Name(t)
			u, err := url.Parse(rawURL)
			require.NoError(t, err)
			proxy := faultproxy.New(t, u.Host)
			return publishertest.OutageDest{
				Dest: publishertest.Dest{
					Publisher: newPublisher(t, connect(t, "mqtt://"+proxy.Addr()), opts...),
					Receiver:  subscribe(t, prefix+topic),
					Topic:     topic,
				},
				Cut:     proxy.Cut,
				Restore: proxy.Restore,
				Stall:   proxy.Blackhole,
			}
		},
		Down: func(t *testing.T) outbox.Publisher {
			o, err := mqttpub.ClientOptions("mqtt://127.0.0.1:" + strconv.Itoa(freePort(t)))
			require.NoError(t, err)
			return newPublisher(t, mqtt.NewClient(o), opts...) // never connected
		},
	})
}

func TestEnvelope(t *testing.T) {
	t.Parallel()
	topic := testsvc.Name(t)
	c := connect(t, testsvc.MQTTURL(t))
	sub := connect(t, testsvc.MQTTURL(t))
	got := make(chan mqtt.Message, 1)
	tok := sub.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) { got <- m })
	require.True(t, tok.WaitTimeout(10*time.Second))
	p := newPublisher(t, c)

	m := &outbox.Message{
		MessageID: outbox.NewMessageID(), AggregateType: "order", AggregateID: "ord-1", EventType: "ORDER_PAID",
		Topic: topic, PartitionKey: "pk", Payload: json.RawMessage(`{"a": "<&>"}`),
		Headers:   map[string]string{outbox.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		CreatedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	require.NoError(t, p.Publish(t.Context(), []*outbox.Message{m})[0])
	select {
	case msg := <-got:
		require.Equal(t, topic, msg.Topic())
		require.EqualValues(t, 1, msg.Qos())
		var e mqttpub.Envelope
		require.NoError(t, json.Unmarshal(msg.Payload(), &e))
		require.Equal(t, mqttpub.Envelope{
			ID: m.MessageID, Type: "ORDER_PAID", Topic: topic, Key: "pk",
			Aggregate: mqttpub.Aggregate{Type: "order", ID: "ord-1"}, ContentType: "application/json",
			Payload: m.Payload, Headers: m.StandardHeaders(), CreatedAt: &m.CreatedAt,
		}, e)
		require.Contains(t, string(msg.Payload()), `"payload":{"a": "<&>"}`)
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
	}
}

func TestRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, connect(t, testsvc.MQTTURL(t)), mqttpub.WithMaxMessageSize(300))
	ok := &outbox.Message{MessageID: "1", AggregateType: "o", AggregateID: "a", EventType: "E", Topic: testsvc.Name(t), Payload: json.RawMessage(`1`)}
	wild := *ok
	wild.Topic = "orders/+"
	big := *ok
	big.Payload = json.RawMessage(fmt.Sprintf("%q", string(make([]byte, 400))))
	errs := p.Publish(t.Context(), []*outbox.Message{&wild, ok, &big})
	require.True(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
	require.NoError(t, errs[1])
	require.True(t, outbox.IsPermanent(errs[2]), "%v", errs[2])

	_, err := mqttpub.New(connect(t, testsvc.MQTTURL(t)), mqttpub.WithTopicPrefix("a/#/"), mqttpub.WithMaxMessageSize(0))
	require.ErrorContains(t, err, "WithTopicPrefix")
	require.ErrorContains(t, err, "WithMaxMessageSize")
}

func TestClientOptions(t *testing.T) {
	t.Parallel()
	o, err := mqttpub.ClientOptions("mqtts://u:pw@broker.example?client_id=relay-1")
	require.NoError(t, err)
	require.Equal(t, "ssl://broker.example:8883", o.Servers[0].String())
	require.Equal(t, "relay-1", o.ClientID)
	require.Equal(t, "u", o.Username)
	o, err = mqttpub.ClientOptions("mqtt://127.0.0.1")
	require.NoError(t, err)
	require.Equal(t, "tcp://127.0.0.1:1883", o.Servers[0].String())
	require.Regexp(t, `^outbox-[0-9a-f]{12}$`, o.ClientID)

	for _, bad := range []string{"http://h", "mqtt://", "mqtt://u:s3cret@h:port"} {
		_, err := mqttpub.ClientOptions(bad)
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "s3cret")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := mqttpub.Connect(ctx, testsvc.MQTTURL(t))
	require.NoError(t, err)
	defer c.Disconnect(100)
	p := newPublisher(t, c)
	require.NoError(t, p.Ping(ctx))
}

func TestRawPayload(t *testing.T) {
	t.Parallel()
	topic := testsvc.Name(t)
	sub := connect(t, testsvc.MQTTURL(t))
	got := make(chan mqtt.Message, 1)
	tok := sub.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) { got <- m })
	require.True(t, tok.WaitTimeout(10*time.Second))
	p := newPublisher(t, connect(t, testsvc.MQTTURL(t)), mqttpub.WithRawPayload(true))

	m := &outbox.Message{
		MessageID: outbox.NewMessageID(), AggregateType: "order", AggregateID: "ord-1", EventType: "ORDER_PAID",
		Topic: topic, ContentType: "application/x-protobuf", Payload: []byte{0x08, 0x96, 0x01, 0xff, 0x00},
	}
	require.NoError(t, p.Publish(t.Context(), []*outbox.Message{m})[0])
	select {
	case msg := <-got:
		require.Equal(t, m.Payload, msg.Payload(), "the payload alone, byte for byte")
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
	}
}
