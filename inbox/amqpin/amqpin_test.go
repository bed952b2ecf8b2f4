package amqpin_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/amqpin"
	"github.com/outboxkit/outbox/inbox/internal/consume"
	"github.com/outboxkit/outbox/inbox/internal/consumetest"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/amqppub"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConsumer(t *testing.T) {
	t.Parallel()
	consumetest.Run(t, func(t *testing.T) consumetest.Broker { return newBroker(t, false) })
}

// broker is a quorum queue and a dead-letter queue on the real RabbitMQ,
// fed through amqppub on the default exchange.
type broker struct {
	conn        *amqp.Connection
	ch          *amqp.Channel // the test's own
	pub         *amqppub.Publisher
	queue, dead string
	mu          sync.Mutex
	deadSeen    []*outbox.Message
}

// newBroker declares the queues; with dlx, the main queue dead-letters
// rejected messages to the dead-letter queue by itself.
func newBroker(t *testing.T, dlx bool) *broker {
	url := testsvc.AMQPURL(t)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	name := testsvc.Name(t)
	b := &broker{conn: conn, ch: ch, queue: name, dead: name + "_dead"}
	qargs := amqp.Table{"x-queue-type": "quorum"}
	if dlx {
		qargs["x-dead-letter-exchange"], qargs["x-dead-letter-routing-key"] = "", b.dead
	}
	_, err = ch.QueueDeclare(b.queue, true, false, false, false, qargs)
	require.NoError(t, err)
	_, err = ch.QueueDeclare(b.dead, true, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(b.queue, false, false, false)
		_, _ = ch.QueueDelete(b.dead, false, false, false)
	})
	b.pub, err = amqppub.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { b.pub.Close() })
	return b
}

func (b *broker) Publish(t *testing.T, msgs ...*outbox.Message) {
	for _, m := range msgs {
		m.Topic = b.queue // the default exchange routes by queue name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, err := range b.pub.Publish(ctx, msgs) {
		require.NoError(t, err, "publish %s", msgs[i].MessageID)
	}
}

func (b *broker) Consumer(t *testing.T, in *inbox.Inbox, h inbox.Handler, s consumetest.Settings) consumetest.Runner {
	opts := []amqpin.Option{amqpin.WithConcurrency(s.Concurrency), amqpin.WithOrderedKeys(s.Ordered),
		amqpin.WithMaxAttempts(s.MaxAttempts), amqpin.WithRetryBackoff(s.RetryBase, 10*s.RetryBase),
		amqpin.WithHooks(s.Hooks...)}
	if s.DeadLetter {
		opts = append(opts, amqpin.WithDeadLetter("", b.dead))
	}
	c, err := amqpin.New(b.conn, b.queue, in, h, opts...)
	require.NoError(t, err)
	return c
}

// DeadLetters takes what arrived on the dead-letter queue since the last call
// and returns everything taken so far.
func (b *broker) DeadLetters(t *testing.T) []*outbox.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		d, ok, err := b.ch.Get(b.dead, true)
		require.NoError(t, err)
		if !ok {
			return append([]*outbox.Message(nil), b.deadSeen...)
		}
		h := map[string]string{}
		for k, v := range d.Headers {
			if s, ok := v.(string); ok {
				h[k] = s
			}
		}
		m := consume.MessageFromHeaders(h, d.Body)
		m.MessageID = d.MessageId
		b.deadSeen = append(b.deadSeen, m)
	}
}

// Drained: nothing is left in the queue (unacknowledged messages return to
// it once their consumer's channel closed).
func (b *broker) Drained(t *testing.T) bool {
	q, err := b.ch.QueueDeclarePassive(b.queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages == 0
}

// Bounce gets the next message and requeues it, times times.
func (b *broker) Bounce(t *testing.T, times int) {
	for i := range times {
		var d amqp.Delivery
		testsvc.Eventually(t, 10*time.Second, func() bool {
			var ok bool
			var err error
			d, ok, err = b.ch.Get(b.queue, false)
			require.NoError(t, err)
			return ok
		}, "no message to bounce")
		require.EqualValues(t, i, d.Headers["x-delivery-count"], "delivery %d", i+1)
		require.NoError(t, d.Nack(false, true))
	}
}

// TestDeadLetterReject: an exhausted message is rejected to the queue's own
// dead-letter exchange.
func TestDeadLetterReject(t *testing.T) {
	t.Parallel()
	b := newBroker(t, true)
	db := sqliteDB(t)
	in, err := inbox.New(db, inbox.SQLite)
	require.NoError(t, err)
	require.NoError(t, in.Migrate(context.Background()))
	h := func(context.Context, *sql.Tx, *outbox.Message) error { return errors.New("no") }
	c, err := amqpin.New(b.conn, b.queue, in, h, amqpin.WithMaxAttempts(2), amqpin.WithRetryBackoff(time.Millisecond, time.Millisecond),
		amqpin.WithDeadLetterReject())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	b.Publish(t, &outbox.Message{MessageID: "poison", AggregateType: "order", AggregateID: "1", EventType: "E", Payload: []byte(`{}`)})

	var d amqp.Delivery
	testsvc.Eventually(t, 20*time.Second, func() bool {
		var ok bool
		d, ok, err = b.ch.Get(b.dead, true)
		require.NoError(t, err)
		return ok
	}, "the message never reached the dead-letter queue")
	require.Equal(t, "poison", d.MessageId)
	require.NotNil(t, d.Headers["x-death"], "not dead-lettered by RabbitMQ")
}

// TestRunEndsWhenTheChannelCloses: deleting the queue closes the consumer's
// channel; Run reports it.
func TestRunEndsWhenTheChannelCloses(t *testing.T) {
	t.Parallel()
	b := newBroker(t, false)
	in, err := inbox.New(sqliteDB(t), inbox.SQLite)
	require.NoError(t, err)
	c, err := amqpin.New(b.conn, b.queue, in, func(context.Context, *sql.Tx, *outbox.Message) error { return nil })
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	testsvc.Eventually(t, 10*time.Second, func() bool {
		q, err := b.ch.QueueDeclarePassive(b.queue, true, false, false, false, nil)
		require.NoError(t, err)
		return q.Consumers == 1
	}, "the consumer never subscribed")
	_, err = b.ch.QueueDelete(b.queue, false, false, false)
	require.NoError(t, err)
	select {
	case err := <-done:
		require.ErrorIs(t, err, amqpin.ErrDeliveriesClosed)
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its queue was deleted")
	}
}

func sqliteDB(t *testing.T) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+testsvc.SQLitePath(t)+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	b := newBroker(t, false)
	in, err := inbox.New(sqliteDB(t), inbox.SQLite)
	require.NoError(t, err)
	noop := func(context.Context, *sql.Tx, *outbox.Message) error { return nil }
	for _, tc := range []struct {
		name    string
		queue   string
		opt     amqpin.Option
		wantErr string
	}{
		{"Defaults", "q", amqpin.WithLogger(slog.New(slog.DiscardHandler)), ""},
		{"NoQueue", "", amqpin.WithConcurrency(1), "queue name"},
		{"Concurrency", "q", amqpin.WithConcurrency(0), "WithConcurrency"},
		{"MaxAttempts", "q", amqpin.WithMaxAttempts(0), "WithMaxAttempts"},
		{"Prefetch", "q", amqpin.WithPrefetch(-1), "WithPrefetch"},
		{"Backoff", "q", amqpin.WithRetryBackoff(2, 1), "WithRetryBackoff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := amqpin.New(b.conn, tc.queue, in, noop, tc.opt)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
