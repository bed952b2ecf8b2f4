package amqppub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/amqppub"
	"github.com/outboxkit/outbox/publisher/publishertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// adminChannel opens a connection of the test's own (not through any proxy)
// and a channel on it, both closed when t ends.
func adminChannel(t *testing.T) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(testsvc.AMQPURL(t))
	if err != nil {
		testsvc.Unavailable(t, "RabbitMQ", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return conn, ch
}

// queue declares an auto-deleted queue named for t (deleted when t ends) and
// returns its name and a Collector fed by a consumer on it.
func queue(t *testing.T, args amqp.Table) (string, *publishertest.Collector) {
	t.Helper()
	name := testsvc.Name(t)
	conn, ch := adminChannel(t)
	_, err := ch.QueueDeclare(name, false, true, false, false, args)
	require.NoError(t, err)
	t.Cleanup(func() {
		if c, err := conn.Channel(); err == nil {
			_, _ = c.QueueDelete(name, false, false, false)
		}
	})
	return name, consume(t, conn, name, "")
}

// consume feeds a Collector from queue; prefix is removed from routing keys
// to give the destination back.
func consume(t *testing.T, conn *amqp.Connection, queue, prefix string) *publishertest.Collector {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	require.NoError(t, err)
	var c publishertest.Collector
	var wg sync.WaitGroup
	wg.Go(func() {
		for d := range deliveries {
			c.Add(received(d, prefix))
		}
	})
	t.Cleanup(func() { ch.Close(); wg.Wait() })
	return &c
}

func received(d amqp.Delivery, prefix string) publishertest.Received {
	h := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		h[k] = fmt.Sprint(v)
	}
	return publishertest.Received{
		MessageID:   d.MessageId,
		Key:         h[outbox.HeaderAggregateID],
		Topic:       strings.TrimPrefix(d.RoutingKey, prefix),
		Headers:     h,
		Payload:     d.Body,
		ContentType: d.ContentType,
	}
}

func newPublisher(t *testing.T, url string, opts ...amqppub.Option) *amqppub.Publisher {
	t.Helper()
	dial, err := amqppub.DialURL(url, amqp.Config{})
	require.NoError(t, err)
	p, err := amqppub.New(dial, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func message(topic, agg string, seq int) *outbox.Message {
	return &outbox.Message{
		MessageID:     outbox.NewMessageID(),
		AggregateType: "order",
		AggregateID:   agg,
		EventType:     "ORDER_PAID",
		Topic:         topic,
		Payload:       json.RawMessage(fmt.Sprintf(`{"order":%q,"seq":%d}`, agg, seq)),
		Headers:       map[string]string{"tenant": "acme"},
		CreatedAt:     time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func requireAllNil(t *testing.T, errs []error, n int) {
	t.Helper()
	require.Len(t, errs, n)
	for i, err := range errs {
		require.NoError(t, err, "message %d", i)
	}
}

func receiveN(t *testing.T, c *publishertest.Collector, n int) []publishertest.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := c.Receive(ctx, n)
	require.NoError(t, err, "received %d of %d", len(got), n)
	return got
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestSuite runs the shared publisher conformance suite on the real RabbitMQ.
func TestSuite(t *testing.T) {
	url := testsvc.AMQPURL(t)
	const limit = 1 << 20
	publishertest.Run(t, publishertest.Features{
		OrderedPerKey:   true, // one queue, batches confirmed one after another
		Dedup:           false,
		Headers:         true,
		ContentType:     true,
		MaxPayload:      limit,
		TooLargePayload: limit + 1, // refused by WithMaxPayloadSize, before the broker
	}, publishertest.Harness{
		New: func(t *testing.T) publishertest.Dest {
			name, c := queue(t, nil)
			return publishertest.Dest{
				Publisher: newPublisher(t, url, amqppub.WithMaxPayloadSize(limit)),
				Receiver:  c,
				Topic:     name,
			}
		},
		Outage: func(t *testing.T) publishertest.OutageDest {
			name, c := queue(t, nil)
			proxy := faultproxy.New(t, "127.0.0.1:"+portOf(t, url))
			p := newPublisher(t, "amqp://guest:guest@"+proxy.Addr()+"/", amqppub.WithReconnectBackoff(50*time.Millisecond, time.Second))
			return publishertest.OutageDest{
				Dest:    publishertest.Dest{Publisher: p, Receiver: c, Topic: name},
				Cut:     proxy.Cut,
				Restore: proxy.Restore,
				Stall:   proxy.Blackhole,
			}
		},
		Down: func(t *testing.T) outbox.Publisher {
			return newPublisher(t, "amqp://guest:guest@127.0.0.1:"+strconv.Itoa(freePort(t))+"/")
		},
	})
}

func portOf(t *testing.T, raw string) string {
	uri, err := amqp.ParseURI(raw)
	require.NoError(t, err)
	return strconv.Itoa(uri.Port)
}

func TestPropertiesAndHeaders(t *testing.T) {
	t.Parallel()
	name := testsvc.Name(t)
	conn, ch := adminChannel(t)
	_, err := ch.QueueDeclare(name, false, true, false, false, nil)
	require.NoError(t, err)
	deliveries, err := ch.Consume(name, "", true, false, false, false, nil)
	require.NoError(t, err)
	_ = conn

	p := newPublisher(t, testsvc.AMQPURL(t))
	m := message(name, "ord-1", 0)
	m.Headers[outbox.HeaderTraceparent] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{m}), 1)

	select {
	case d := <-deliveries:
		require.Equal(t, m.MessageID, d.MessageId)
		require.Equal(t, uint8(amqp.Persistent), d.DeliveryMode)
		require.Equal(t, "application/json", d.ContentType)
		require.Equal(t, "ORDER_PAID", d.Type)
		require.True(t, m.CreatedAt.Equal(d.Timestamp), "timestamp %v", d.Timestamp)
		require.Equal(t, "", d.Exchange)
		require.Equal(t, name, d.RoutingKey)
		require.JSONEq(t, string(m.Payload), string(d.Body))
		for k, v := range m.StandardHeaders() {
			require.Equal(t, v, d.Headers[k], "header %s", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
}

// A message no queue takes comes back (mandatory) and fails alone, marked
// Unroutable: retryable by default, permanent with WithUnroutablePermanent.
func TestUnroutable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		opts      []amqppub.Option
		permanent bool
	}{
		{"RetriedByDefault", nil, false},
		{"PermanentWhenAsked", []amqppub.Option{amqppub.WithUnroutablePermanent(true)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			name, c := queue(t, nil)
			p := newPublisher(t, testsvc.AMQPURL(t), tc.opts...)

			msgs := []*outbox.Message{message(name, "a", 0), message(name+"_nobody", "b", 0), message(name, "c", 0)}
			errs := p.Publish(t.Context(), msgs)
			require.Len(t, errs, 3)
			require.NoError(t, errs[0])
			require.True(t, outbox.IsUnroutable(errs[1]), "%v", errs[1])
			require.Equal(t, tc.permanent, outbox.IsPermanent(errs[1]), "%v", errs[1])
			require.False(t, outbox.IsUnavailable(errs[1]), "one message's key, not the broker: %v", errs[1])
			require.ErrorContains(t, errs[1], fmt.Sprintf(
				`unroutable: 312 NO_ROUTE: no queue bound to exchange "" with routing key %q`, name+"_nobody"))
			require.NoError(t, errs[2])
			got := receiveN(t, c, 2)
			require.ElementsMatch(t, []string{msgs[0].MessageID, msgs[2].MessageID}, []string{got[0].MessageID, got[1].MessageID})
		})
	}
}

// Without mandatory the broker drops an unroutable message silently and
// confirms it: the reason mandatory is the default.
func TestNotMandatoryDropsUnroutable(t *testing.T) {
	t.Parallel()
	name, _ := queue(t, nil)
	loose := newPublisher(t, testsvc.AMQPURL(t), amqppub.WithMandatory(false))
	requireAllNil(t, loose.Publish(t.Context(), []*outbox.Message{message(name+"_nobody", "b", 1)}), 1)
}

// A queue that refuses overflow makes the broker nack: a plain error, retried later.
func TestNackIsPlainError(t *testing.T) {
	t.Parallel()
	// No consumer: the queue holds one message and refuses the rest.
	held := testsvc.Name(t)
	_, ch := adminChannel(t)
	_, err := ch.QueueDeclare(held, false, true, false, false, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ch.QueueDelete(held, false, false, false) })
	p := newPublisher(t, testsvc.AMQPURL(t))

	errs := p.Publish(t.Context(), []*outbox.Message{message(held, "a", 0), message(held, "a", 1), message(held, "a", 2)})
	require.Len(t, errs, 3)
	require.NoError(t, errs[0])
	for _, err := range errs[1:] {
		require.ErrorContains(t, err, "nacked by the broker")
		require.False(t, outbox.IsPermanent(err))
		require.False(t, outbox.IsUnavailable(err))
	}
	// The channel survives a nack and is reused.
	_, err = ch.QueuePurge(held, false)
	require.NoError(t, err)
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{message(held, "a", 3)}), 1)
}

// A named exchange with a routing-key prefix; a missing exchange is the whole
// destination being unusable (Unavailable), and the publisher recovers from
// the channel the broker closed.
func TestNamedExchange(t *testing.T) {
	t.Parallel()
	name := testsvc.Name(t)
	exchange := name + "_x"
	conn, ch := adminChannel(t)
	require.NoError(t, ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, false, true, false, false, nil))
	_, err := ch.QueueDeclare(name, false, true, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(name, "orders.#", exchange, false, nil))
	t.Cleanup(func() {
		if c, err := conn.Channel(); err == nil {
			_, _ = c.QueueDelete(name, false, false, false)
			_ = c.ExchangeDelete(exchange, false, false)
		}
	})
	c := consume(t, conn, name, "orders.")

	p := newPublisher(t, testsvc.AMQPURL(t), amqppub.WithExchange(exchange), amqppub.WithRoutingKeyPrefix("orders."))
	m := message("", "a", 0) // destination = event type
	require.Equal(t, "orders.ORDER_PAID", p.RoutingKey(m))
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{m}), 1)
	got := receiveN(t, c, 1)
	require.Equal(t, m.MessageID, got[0].MessageID)
	require.Equal(t, "ORDER_PAID", got[0].Topic)

	missing := newPublisher(t, testsvc.AMQPURL(t), amqppub.WithExchange(name+"_missing"))
	errs := missing.Publish(t.Context(), []*outbox.Message{message(name, "a", 1), message(name, "a", 2)})
	for _, err := range errs {
		require.True(t, outbox.IsUnavailable(err), "%v", err)
		require.ErrorContains(t, err, "NOT_FOUND")
	}
	require.NoError(t, ch.ExchangeDeclare(name+"_missing", amqp.ExchangeDirect, false, true, false, false, nil))
	require.NoError(t, ch.QueueBind(name, name, name+"_missing", false, nil))
	requireAllNil(t, missing.Publish(t.Context(), []*outbox.Message{message(name, "a", 3)}), 1)
}

// While the connection is cut, Publish reports Unavailable at once (it does
// not sit out its deadline), and the loop reconnects after Restore.
func TestCutFailsFastAndReconnects(t *testing.T) {
	t.Parallel()
	name, c := queue(t, nil)
	proxy := faultproxy.New(t, "127.0.0.1:"+portOf(t, testsvc.AMQPURL(t)))
	p := newPublisher(t, "amqp://guest:guest@"+proxy.Addr()+"/", amqppub.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond))
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{message(name, "a", 0)}), 1)

	proxy.Cut()
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		start := time.Now()
		errs := p.Publish(ctx, []*outbox.Message{message(name, "a", 1)})
		cancel()
		require.Less(t, time.Since(start), 2*time.Second, "waited for its deadline while down")
		require.True(t, outbox.IsUnavailable(errs[0]), "%v", errs[0])
	}
	require.Error(t, p.Ping(t.Context()))

	proxy.Restore()
	testsvc.Eventually(t, 10*time.Second, func() bool { return p.Ping(t.Context()) == nil }, "no reconnect")
	m := message(name, "a", 2)
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{m}), 1)
	got := receiveN(t, c, 2)
	require.Equal(t, m.MessageID, got[1].MessageID)
}

// A silent broker: no confirm arrives, Publish returns at its deadline with
// a plain timeout (not Unavailable: the connection still looks open).
func TestConfirmTimeoutIsPlain(t *testing.T) {
	t.Parallel()
	name, _ := queue(t, nil)
	proxy := faultproxy.New(t, "127.0.0.1:"+portOf(t, testsvc.AMQPURL(t)))
	p := newPublisher(t, "amqp://guest:guest@"+proxy.Addr()+"/")
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{message(name, "a", 0)}), 1)

	proxy.Blackhole()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := p.Publish(ctx, []*outbox.Message{message(name, "a", 1), message(name, "a", 2)})
	require.Less(t, time.Since(start), time.Second)
	for _, err := range errs {
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, outbox.IsUnavailable(err))
		require.False(t, outbox.IsPermanent(err))
	}
	proxy.Restore()
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{message(name, "a", 3)}), 1)
}

func TestSetupAndConcurrency(t *testing.T) {
	t.Parallel()
	name := testsvc.Name(t)
	conn, _ := adminChannel(t)
	t.Cleanup(func() {
		if c, err := conn.Channel(); err == nil {
			_, _ = c.QueueDelete(name, false, false, false)
		}
	})
	p := newPublisher(t, testsvc.AMQPURL(t), amqppub.WithMaxChannels(2), amqppub.WithSetup(func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(name, false, false, false, false, nil)
		return err
	}))
	require.NoError(t, p.Ping(t.Context()))
	c := consume(t, conn, name, "")

	const workers, each = 6, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			msgs := make([]*outbox.Message, each)
			for i := range msgs {
				msgs[i] = message(name, "w"+strconv.Itoa(w), i)
			}
			for i, err := range p.Publish(t.Context(), msgs) {
				if err != nil {
					t.Errorf("worker %d message %d: %v", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, receiveN(t, c, workers*each), workers*each)
}

func TestCloseAndValidation(t *testing.T) {
	t.Parallel()
	name, _ := queue(t, nil)
	dial, err := amqppub.DialURL(testsvc.AMQPURL(t), amqp.Config{})
	require.NoError(t, err)
	p, err := amqppub.New(dial)
	require.NoError(t, err)
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{message(name, "a", 0)}), 1)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	errs := p.Publish(t.Context(), []*outbox.Message{message(name, "a", 1)})
	require.ErrorIs(t, errs[0], amqppub.ErrClosed)
	require.True(t, outbox.IsUnavailable(errs[0]))
	require.ErrorIs(t, p.Ping(t.Context()), amqppub.ErrClosed)

	_, err = amqppub.New(dial, amqppub.WithMaxChannels(0), amqppub.WithReconnectBackoff(time.Second, time.Millisecond))
	require.ErrorContains(t, err, "WithMaxChannels")
	require.ErrorContains(t, err, "WithReconnectBackoff")

	for _, tc := range []struct{ url, secret string }{
		{"amqp://guest:s3cret@host:notaport/", ":s3cret@"},
		// A one-letter password is taken out of the URL by its place, not
		// replaced wherever the letter stands ("invalid" stays readable).
		{"amqp://guest:a@host:notaport/", ":a@"},
	} {
		_, err = amqppub.DialURL(tc.url, amqp.Config{})
		require.ErrorContains(t, err, "invalid port")
		require.NotContains(t, err.Error(), tc.secret)
	}

	// Long routing keys and big bodies are refused before the broker.
	q := newPublisher(t, testsvc.AMQPURL(t), amqppub.WithMaxPayloadSize(10), amqppub.WithRoutingKeyPrefix(strings.Repeat("k", 250)))
	errs = q.Publish(t.Context(), []*outbox.Message{message("topic", "a", 0)})
	require.True(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
}

// Dial failures name the server without the password.
func TestDialErrorHidesPassword(t *testing.T) {
	t.Parallel()
	dial, err := amqppub.DialURL("amqp://guest:s3cret@127.0.0.1:"+strconv.Itoa(freePort(t))+"/", amqp.Config{})
	require.NoError(t, err)
	_, err = dial(t.Context())
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")

	wrong, err := amqppub.DialURL(strings.Replace(testsvc.AMQPURL(t), "guest:guest", "guest:wrong", 1), amqp.Config{})
	require.NoError(t, err)
	p, err := amqppub.New(wrong)
	require.NoError(t, err)
	defer p.Close()
	errs := p.Publish(t.Context(), []*outbox.Message{message("x", "a", 0)})
	require.True(t, outbox.IsUnavailable(errs[0]), "%v", errs[0])
	require.NotContains(t, errs[0].Error(), "wrong")
}
