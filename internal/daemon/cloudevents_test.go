package daemon

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	kafkace "github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	natsce "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/cepub"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// ceEventType is the event type, and so the destination, of every message
// the CloudEvents tests write.
const ceEventType = "ORDER_PAID"

// ceSink is a broker the daemon sends CloudEvents to, and the events that
// the official SDK decoded from what arrived, through its binding for that
// broker.
type ceSink struct {
	broker config.Broker
	events chan *event.Event
	errs   chan error // what the SDK could not decode
	// encodings are the SDK's view of how each message came (binary or
	// structured), one per event, in arrival order.
	encodings chan binding.Encoding
}

func newCESink(b config.Broker) *ceSink {
	return &ceSink{broker: b, events: make(chan *event.Event, 16), errs: make(chan error, 16),
		encodings: make(chan binding.Encoding, 16)}
}

func (s *ceSink) decode(ctx context.Context, m binding.Message) {
	ev, err := binding.ToEvent(ctx, m)
	if err != nil {
		s.errs <- err
		return
	}
	s.encodings <- m.ReadEncoding()
	s.events <- ev
}

// httpCESink is a webhook endpoint read with the SDK's HTTP binding.
func httpCESink(t *testing.T) *ceSink {
	var s *ceSink
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost { // the start-up ping is a HEAD
			return
		}
		s.decode(r.Context(), cehttp.NewMessageFromHttpRequest(r))
	}))
	t.Cleanup(srv.Close)
	s = newCESink(config.Broker{Name: "hook", URL: config.NewSecret(srv.URL + "/in/{destination}")})
	return s
}

// kafkaCESink is a kfake topic read with franz-go, each record handed to
// the SDK's Kafka binding (its Sarama module's message reader, fed the
// record's value, content-type and headers: the SDK has no franz-go binding).
func kafkaCESink(t *testing.T) *ceSink {
	prefix := "outbox."
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, prefix+ceEventType))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(prefix+ceEventType),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	s := newCESink(config.Broker{Name: "log", URL: config.NewSecret("kafka://" + strings.Join(c.ListenAddrs(), ",")),
		Prefix: &prefix})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				headers := make(map[string][]byte, len(r.Headers))
				var contentType string
				for _, h := range r.Headers {
					headers[h.Key] = h.Value
					if h.Key == "content-type" {
						contentType = string(h.Value)
					}
				}
				s.decode(ctx, kafkace.NewMessage(r.Value, contentType, headers))
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return s
}

// natsCESink is a JetStream stream read with the SDK's JetStream binding.
func natsCESink(t *testing.T) *ceSink {
	st := newNATSStream(t)
	s := newCESink(st.broker("events"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for seq := uint64(1); ctx.Err() == nil; {
			stream, err := st.js.Stream(ctx, st.name)
			if err != nil {
				time.Sleep(20 * time.Millisecond) // the daemon makes the stream when it starts
				continue
			}
			raw, err := stream.GetMsg(ctx, seq)
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			seq++
			s.decode(ctx, natsce.NewMessage(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data}))
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// mqttCESink is a Mosquitto topic. The SDK's MQTT binding speaks MQTT 5
// (paho.golang) and finds a structured event by its content type property,
// which MQTT 3.1.1 has not; so each payload goes to the SDK's JSON event
// format (event.Event's UnmarshalJSON), which is what that binding calls.
func mqttCESink(t *testing.T) *ceSink {
	url := testsvc.MQTTURL(t)
	prefix := testsvc.Name(t) + "/"
	sub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(url).SetClientID(testsvc.Name(t)))
	tok := sub.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	t.Cleanup(func() { sub.Disconnect(100) })
	s := newCESink(config.Broker{Name: "devices", URL: config.NewSecret("mqtt://" + strings.TrimPrefix(url, "tcp://")),
		Prefix: &prefix})
	tok = sub.Subscribe(prefix+"#", 1, func(_ mqtt.Client, m mqtt.Message) {
		ev := event.New()
		if err := json.Unmarshal(m.Payload(), &ev); err != nil {
			s.errs <- err
			return
		}
		s.encodings <- binding.EncodingStructured
		s.events <- &ev
	})
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	return s
}

// amqpCESink is a RabbitMQ queue bound to the routing key the daemon
// sends to. The SDK's AMQP binding is for AMQP 1.0 (go-amqp), which this
// RabbitMQ does not speak, and its module is not served to this build; so
// structured events are read by the SDK's JSON event format, and binary
// ones by amqpBinary.
func amqpCESink(t *testing.T) *ceSink {
	url := testsvc.AMQPURL(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		testsvc.Unavailable(t, "RabbitMQ", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	prefix := testsvc.Name(t) + "."
	queue := prefix + ceEventType // the default exchange routes by queue name
	_, err = ch.QueueDeclare(queue, false, true, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	require.NoError(t, err)
	s := newCESink(config.Broker{Name: "rabbit", URL: config.NewSecret(url), Prefix: &prefix})
	go func() {
		for d := range deliveries {
			if _, binary := d.Headers["cloudEvents:specversion"]; binary {
				s.amqpBinary(d)
				continue
			}
			if d.ContentType != cepub.ContentTypeStructured {
				s.errs <- fmt.Errorf("content type %q, not structured", d.ContentType)
				continue
			}
			ev := event.New()
			if err := json.Unmarshal(d.Body, &ev); err != nil {
				s.errs <- err
				continue
			}
			s.encodings <- binding.EncodingStructured
			s.events <- &ev
		}
	}()
	return s
}

// amqpBinary builds the event of a binary-mode AMQP 0-9-1 delivery by the
// AMQP binding's rules (cloudEvents: properties, the content-type property,
// the body as data) with the SDK's setters: no SDK reader takes AMQP 0-9-1.
func (s *ceSink) amqpBinary(d amqp.Delivery) {
	ev := event.New()
	for k, v := range d.Headers {
		name, ok := strings.CutPrefix(k, "cloudEvents:")
		str, isString := v.(string)
		if !ok || !isString {
			continue
		}
		switch name {
		case "specversion":
			ev.SetSpecVersion(str)
		case "id":
			ev.SetID(str)
		case "source":
			ev.SetSource(str)
		case "type":
			ev.SetType(str)
		case "subject":
			ev.SetSubject(str)
		case "time":
			tm, err := time.Parse(time.RFC3339Nano, str)
			if err != nil {
				s.errs <- err
				return
			}
			ev.SetTime(tm)
		default:
			ev.SetExtension(name, str)
		}
	}
	if err := ev.SetData(d.ContentType, d.Body); err != nil {
		s.errs <- err
		return
	}
	s.encodings <- binding.EncodingBinary
	s.events <- &ev
}

// writeCE commits a JSON message with trace context and a binary one.
func writeCE(t *testing.T, db *sql.DB, s *sqlitestore.Store) []*outbox.Message {
	t.Helper()
	msgs := []*outbox.Message{
		{AggregateType: "order", AggregateID: "o-1", EventType: ceEventType,
			Payload: []byte(`{"order":"o-1","note":"<&> café"}`),
			Headers: map[string]string{
				outbox.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				outbox.HeaderTracestate:  "vendor=x",
			}},
		{AggregateType: "order", AggregateID: "o-2", EventType: ceEventType, PartitionKey: "region-eu",
			ContentType: "application/x-protobuf", Payload: []byte{0x08, 0x96, 0x01, 0x12, 0x02, 0xff, 0x00, 0xc3}},
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter[*sql.Tx](s).Write(ctx, tx, msgs...))
	require.NoError(t, tx.Commit())
	return msgs
}

// TestRunCloudEvents runs the daemon with format: cloudevents on every
// broker whose binding the official Go SDK has, in both modes, and checks
// that the SDK reads back the event of each message.
func TestRunCloudEvents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mode string
		sink func(t *testing.T) *ceSink
	}{
		{"HTTPBinary", config.CloudEventsBinary, httpCESink},
		{"HTTPStructured", config.CloudEventsStructured, httpCESink},
		{"KafkaBinary", config.CloudEventsBinary, kafkaCESink},
		{"KafkaStructured", config.CloudEventsStructured, kafkaCESink},
		{"NATSBinary", config.CloudEventsBinary, natsCESink},
		{"NATSStructured", config.CloudEventsStructured, natsCESink},
		{"MQTTStructured", config.CloudEventsStructured, mqttCESink},
		{"AMQPStructured", config.CloudEventsStructured, amqpCESink},
		{"AMQPBinary", config.CloudEventsBinary, amqpCESink}, // read by our own code, see amqpBinary
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.sink(t)
			b := s.broker
			b.Format, b.CloudEventsMode = config.FormatCloudEvents, tc.mode
			dsn, db, store := sqliteDB(t)
			cfg := baseConfig(dsn, b)
			before := time.Now().Add(-time.Second)
			msgs := writeCE(t, db, store)
			after := time.Now().Add(time.Second)
			d, err := New(cfg, nil)
			require.NoError(t, err)
			stop := running(t, d)

			got := make(map[string]*event.Event)
			for len(got) < len(msgs) {
				select {
				case ev := <-s.events:
					got[ev.ID()] = ev
				case err := <-s.errs:
					t.Fatalf("the SDK could not read an event: %v", err)
				case <-time.After(20 * time.Second):
					t.Fatalf("%d of %d events within 20 s", len(got), len(msgs))
				}
			}
			require.NoError(t, stop())

			want := binding.EncodingBinary
			if tc.mode == config.CloudEventsStructured {
				want = binding.EncodingStructured
			}
			for range msgs {
				require.Equal(t, want, <-s.encodings, "the SDK saw the mode asked for")
			}
			for _, m := range msgs {
				ev := got[m.MessageID]
				require.NotNil(t, ev, "event %s", m.MessageID)
				require.NoError(t, ev.Validate())
				require.Equal(t, "1.0", ev.SpecVersion())
				require.Equal(t, m.EventType, ev.Type())
				require.Equal(t, m.AggregateID, ev.Subject())
				require.Equal(t, "/outbox/outbox_message", ev.Source())
				require.Equal(t, m.MediaType(), ev.DataContentType())
				require.WithinRange(t, ev.Time(), before, after, "time is the write time")
				if m.JSONPayload() {
					require.JSONEq(t, string(m.Payload), string(ev.Data()))
				} else {
					require.Equal(t, m.Payload, ev.Data(), "data byte for byte")
				}
				ext := ev.Extensions()
				require.Equal(t, m.AggregateType, ext["aggregatetype"])
				require.Equal(t, m.Key(), ext["partitionkey"])
				if tp := m.Headers[outbox.HeaderTraceparent]; tp != "" {
					require.Equal(t, tp, ext["traceparent"])
					require.Equal(t, m.Headers[outbox.HeaderTracestate], ext["tracestate"])
				} else {
					require.NotContains(t, ext, "traceparent")
				}
			}
		})
	}
}

// TestRunCloudEventsPerRoute sends one event type as structured
// CloudEvents and another in the outbox format through one Kafka broker.
func TestRunCloudEventsPerRoute(t *testing.T) {
	t.Parallel()
	prefix := "outbox."
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, prefix+ceEventType, prefix+"ORDER_SHIPPED"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	dsn, db, store := sqliteDB(t)
	cfg := baseConfig(dsn, config.Broker{Name: "log", URL: config.NewSecret("kafka://" + strings.Join(c.ListenAddrs(), ",")),
		Prefix: &prefix})
	cfg.CloudEventsSource = "/shop"
	cfg.Routes = []config.Route{{EventType: ceEventType, Broker: "log", Format: config.FormatCloudEvents,
		CloudEventsMode: config.CloudEventsStructured}}
	cfg.DefaultRoute = &config.Route{Broker: "log"}
	paid := writeCE(t, db, store)
	shipped := writeSQLite(t, db, store, "ORDER_SHIPPED", 1)
	d, err := New(cfg, nil)
	require.NoError(t, err)
	stop := running(t, d)

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(prefix+ceEventType, prefix+"ORDER_SHIPPED"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	byTopic := map[string]*kgo.Record{}
	for len(byTopic) < 2 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			byTopic[r.Topic] = r
		})
	}
	require.NoError(t, stop())
	require.Len(t, byTopic, 2)

	header := func(r *kgo.Record, k string) string {
		for _, h := range r.Headers {
			if h.Key == k {
				return string(h.Value)
			}
		}
		return ""
	}
	ce := byTopic[prefix+ceEventType]
	require.Equal(t, cepub.ContentTypeStructured, header(ce, "content-type"))
	ev := event.New()
	require.NoError(t, json.Unmarshal(ce.Value, &ev))
	require.Contains(t, []string{paid[0].MessageID, paid[1].MessageID}, ev.ID())
	require.Equal(t, "/shop", ev.Source())

	plain := byTopic[prefix+"ORDER_SHIPPED"]
	require.Equal(t, "application/json", header(plain, "content-type"))
	require.Equal(t, shipped[0].MessageID, header(plain, outbox.HeaderMessageID))
	require.JSONEq(t, string(shipped[0].Payload), string(plain.Value), "the outbox format: the payload as is")
}
