package natsin_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/internal/consume"
	"github.com/outboxkit/outbox/inbox/internal/consumetest"
	"github.com/outboxkit/outbox/inbox/natsin"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/natspub"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConsumer(t *testing.T) {
	t.Parallel()
	consumetest.Run(t, func(t *testing.T) consumetest.Broker { return newBroker(t) })
}

// broker is a stream (subjects <name>.>) with a durable consumer, and a
// dead-letter stream, on the real NATS server.
type broker struct {
	js     jetstream.JetStream
	pub    *natspub.Publisher
	stream string
	dead   string // dead-letter stream and subject
	cons   jetstream.Consumer
	mu     sync.Mutex
	seen   map[string]bool
}

func newBroker(t *testing.T) *broker {
	nc, err := nats.Connect(testsvc.NATSURL(t))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	name := testsvc.Name(t)
	b := &broker{js: js, stream: name, dead: name + "_dead", seen: map[string]bool{}}
	ctx := context.Background()
	require.NoError(t, natspub.EnsureStream(ctx, js, name, []string{name + ".>"}, 0))
	testsvc.CreateStream(t, js, jetstream.StreamConfig{Name: b.dead, Subjects: []string{b.dead}})
	t.Cleanup(func() {
		_ = js.DeleteStream(context.Background(), b.stream)
		_ = js.DeleteStream(context.Background(), b.dead)
	})
	b.cons, err = js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
		Durable: "shipping", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second,
	})
	require.NoError(t, err)
	b.pub, err = natspub.New(js, natspub.WithSubjectPrefix(name+"."))
	require.NoError(t, err)
	return b
}

// Publish sends a message's first copy through natspub (with Nats-Msg-Id),
// and later copies without Nats-Msg-Id, as if the duplicate window had passed.
func (b *broker) Publish(t *testing.T, msgs ...*outbox.Message) {
	ctx := context.Background()
	for _, m := range msgs {
		m.Topic = "orders"
		b.mu.Lock()
		seen := b.seen[m.MessageID]
		b.seen[m.MessageID] = true
		b.mu.Unlock()
		if !seen {
			require.NoError(t, b.pub.Publish(ctx, []*outbox.Message{m})[0])
			continue
		}
		hdr := nats.Header{}
		for k, v := range m.StandardHeaders() {
			hdr.Set(k, v)
		}
		hdr.Set(natspub.HeaderContentType, m.MediaType()) // as natspub sends it: the check wants it on every copy
		_, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: b.pub.Subject(m), Header: hdr, Data: m.Payload})
		require.NoError(t, err)
	}
}

func (b *broker) Consumer(t *testing.T, in *inbox.Inbox, h inbox.Handler, s consumetest.Settings) consumetest.Runner {
	opts := []natsin.Option{natsin.WithConcurrency(s.Concurrency), natsin.WithOrderedKeys(s.Ordered),
		natsin.WithMaxAttempts(s.MaxAttempts), natsin.WithRetryBackoff(s.RetryBase, 10*s.RetryBase),
		natsin.WithHooks(s.Hooks...)}
	if s.DeadLetter {
		opts = append(opts, natsin.WithDeadLetter(b.js, b.dead))
	}
	c, err := natsin.New(b.cons, in, h, opts...)
	require.NoError(t, err)
	return c
}

func (b *broker) DeadLetters(t *testing.T) []*outbox.Message {
	ctx := context.Background()
	s, err := b.js.Stream(ctx, b.dead)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	if info.State.Msgs == 0 {
		return nil
	}
	oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	batch, err := oc.FetchNoWait(int(info.State.Msgs))
	require.NoError(t, err)
	var out []*outbox.Message
	for m := range batch.Messages() {
		h := map[string]string{}
		for k, v := range m.Headers() {
			h[k] = v[0]
		}
		out = append(out, consume.MessageFromHeaders(h, m.Data()))
	}
	require.NoError(t, batch.Error())
	return out
}

// Bounce fetches the next message and naks it, times times.
func (b *broker) Bounce(t *testing.T, times int) {
	for i := range times {
		batch, err := b.cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		n := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			require.NoError(t, err)
			require.Equal(t, uint64(i+1), meta.NumDelivered)
			require.NoError(t, m.Nak())
			n++
		}
		require.NoError(t, batch.Error())
		require.Equal(t, 1, n)
	}
}

func (b *broker) Drained(t *testing.T) bool {
	info, err := b.cons.Info(context.Background())
	require.NoError(t, err)
	return info.NumAckPending == 0 && info.NumPending == 0
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	db, err := sql.Open("sqlite", ":memory:")
	require.NoError(t, err)
	defer db.Close()
	in, err := inbox.New(db, inbox.SQLite)
	require.NoError(t, err)
	noop := func(context.Context, *sql.Tx, *outbox.Message) error { return nil }
	for _, tc := range []struct {
		name    string
		opt     natsin.Option
		wantErr string
	}{
		{"Defaults", natsin.WithLogger(slog.New(slog.DiscardHandler)), ""},
		{"Concurrency", natsin.WithConcurrency(0), "WithConcurrency"},
		{"MaxAttempts", natsin.WithMaxAttempts(0), "WithMaxAttempts"},
		{"Backoff", natsin.WithRetryBackoff(time.Second, time.Millisecond), "WithRetryBackoff"},
		{"DeadLetterWithoutSubject", natsin.WithDeadLetter(b.js, ""), "WithDeadLetter"},
		{"DeadLetterWithoutJetStream", natsin.WithDeadLetter(nil, "dead"), "WithDeadLetter"},
		{"Logger", natsin.WithLogger(nil), "WithLogger"},
		{"PullExpiryShort", natsin.WithPullExpiry(time.Second), "WithPullExpiry"},
		{"PullExpiryLong", natsin.WithPullExpiry(3 * time.Minute), "WithPullExpiry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := natsin.New(b.cons, in, noop, tc.opt)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	require.Panics(t, func() { _, _ = natsin.New(nil, in, noop) })
}

// TestRunSurvivesMissedHeartbeats partitions the consumer from the server
// for longer than its heartbeat check: Run logs, pulls again when the
// network is back and processes what was published meanwhile, instead of
// returning "no heartbeat received" and stopping the consumer.
func TestRunSurvivesMissedHeartbeats(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	proxy := faultproxy.New(t, strings.TrimPrefix(testsvc.NATSURL(t), "nats://"))
	nc, err := nats.Connect("nats://" + proxy.Addr())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cons, err := js.Consumer(context.Background(), b.stream, "shipping")
	require.NoError(t, err)

	db, err := sql.Open("sqlite", ":memory:")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1) // one in-memory database
	in, err := inbox.New(db, inbox.SQLite)
	require.NoError(t, err)
	require.NoError(t, in.Migrate(context.Background()))
	var done atomic.Int64
	h := func(context.Context, *sql.Tx, *outbox.Message) error { done.Add(1); return nil }
	c, err := natsin.New(cons, in, h, natsin.WithPullExpiry(2*time.Second))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var exit atomic.Pointer[error] // Run's result, once it returned
	ran := make(chan struct{})
	go func() { err := c.Run(ctx); exit.Store(&err); close(ran) }()
	t.Cleanup(func() { cancel(); <-ran })

	publish := func(from, to int) {
		for i := from; i < to; i++ {
			b.Publish(t, &outbox.Message{MessageID: fmt.Sprintf("hb-%d", i), AggregateID: "o", EventType: "e",
				Payload: []byte(`{}`)})
		}
	}
	publish(0, 3)
	require.Eventually(t, func() bool { return done.Load() == 3 }, 10*time.Second, 10*time.Millisecond)
	proxy.Blackhole() // the heartbeat check fires after 1 s of silence
	time.Sleep(2500 * time.Millisecond)
	publish(3, 6)
	proxy.Restore()
	require.Eventually(t, func() bool { return exit.Load() != nil || done.Load() == 6 }, 15*time.Second,
		10*time.Millisecond, "processed %d of 6 after the partition", done.Load())
	if err := exit.Load(); err != nil {
		t.Fatalf("Run returned after the partition: %v", *err)
	}
	cancel()
	<-ran
	require.NoError(t, *exit.Load())
}
