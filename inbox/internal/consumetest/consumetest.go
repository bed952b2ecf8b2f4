// Package consumetest is the suite every broker consumer of package inbox
// runs against its real broker: exactly-once effects with duplicates and
// several instances, retries, dead letters, per-key order, and a clean stop
// that loses nothing.
package consumetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// Settings are the consumer options the suite sets; a Broker maps them to
// its package's options.
type Settings struct {
	Concurrency int
	Ordered     bool
	MaxAttempts int
	RetryBase   time.Duration // the retry cap is 10 × base
	DeadLetter  bool          // send exhausted messages to the broker's dead-letter destination
	Hooks       []inbox.HookDelivery
}

// Runner is a consumer.
type Runner interface {
	Run(ctx context.Context) error
}

// Broker is one test's destination (stream, topic, queue) on a real broker.
type Broker interface {
	// Publish sends one more copy of each message, in order, as the outbox
	// publisher would, past any broker-side deduplication (a copy after the
	// duplicate window). It sets the messages' Topic to the destination.
	Publish(t *testing.T, msgs ...*outbox.Message)
	// Consumer returns a consumer of the destination. All consumers of one
	// Broker share the subscription (group, durable consumer, queue).
	Consumer(t *testing.T, in *inbox.Inbox, h inbox.Handler, s Settings) Runner
	// DeadLetters returns the messages on the dead-letter destination so
	// far, decoded, with their headers.
	DeadLetters(t *testing.T) []*outbox.Message
	// Drained reports whether every copy published so far was acknowledged;
	// the suite calls it after its consumers stopped.
	Drained(t *testing.T) bool
}

// Bouncer is implemented by a Broker whose broker counts deliveries.
type Bouncer interface {
	// Bounce receives the next message times times, outside any Consumer,
	// and gives it back unacknowledged each time, as consumers that crashed
	// would.
	Bounce(t *testing.T, times int)
}

// Run runs the suite; newBroker returns a fresh destination for a test.
func Run(t *testing.T, newBroker func(t *testing.T) Broker) {
	t.Run("ExactlyOnceAcrossInstances", func(t *testing.T) { t.Parallel(); exactlyOnce(t, newBroker(t)) })
	t.Run("RetriesThenProcessesOnce", func(t *testing.T) { t.Parallel(); retries(t, newBroker(t)) })
	t.Run("PoisonIsDeadLettered", func(t *testing.T) { t.Parallel(); poison(t, newBroker(t)) })
	t.Run("OrderedPerKey", func(t *testing.T) { t.Parallel(); ordered(t, newBroker(t)) })
	t.Run("StopLosesNothing", func(t *testing.T) { t.Parallel(); stop(t, newBroker(t)) })
	t.Run("CountsEarlierDeliveries", func(t *testing.T) {
		t.Parallel()
		b := newBroker(t)
		if _, ok := b.(Bouncer); !ok {
			t.Skip("the broker does not count deliveries")
		}
		earlierDeliveries(t, b)
	})
}

// waitTimeout bounds every wait of the suite.
const waitTimeout = 30 * time.Second

// env is a test's database and inbox instances.
type env struct {
	db      *sql.DB
	inboxes []*inbox.Inbox
	tally   *tally
	stops   []func()
}

func newEnv(t *testing.T, instances int) *env {
	pool, _, _ := testsvc.PostgresSchema(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	_, err := db.ExecContext(ctx, "CREATE TABLE effect (message_id text NOT NULL, aggregate_id text NOT NULL, seq int NOT NULL)")
	require.NoError(t, err)
	e := &env{db: db, tally: &tally{}}
	for range instances {
		in, err := inbox.New(db, inbox.Postgres, inbox.WithConsumer("shipping"))
		require.NoError(t, err)
		require.NoError(t, in.Migrate(ctx))
		e.inboxes = append(e.inboxes, in)
	}
	return e
}

// effect is the handler's work: one row per run, in the inbox transaction.
func effect(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
	seq, _ := strconv.Atoi(m.Headers["seq"])
	_, err := tx.ExecContext(ctx, "INSERT INTO effect (message_id, aggregate_id, seq) VALUES ($1, $2, $3)",
		m.MessageID, m.AggregateID, seq)
	return err
}

func (e *env) effects(t *testing.T) map[string]int {
	rows, err := e.db.Query("SELECT message_id, count(*) FROM effect GROUP BY message_id")
	require.NoError(t, err)
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		got[id] = n
	}
	require.NoError(t, rows.Err())
	return got
}

// start runs r until the test ends or stop (or stopAll) is called, and
// checks that Run returns nil.
func (e *env) start(t *testing.T, r Runner) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err, "Run")
			case <-time.After(waitTimeout):
				t.Errorf("Run did not return within %v of its context's end", waitTimeout)
			}
		})
	}
	t.Cleanup(stop)
	e.stops = append(e.stops, stop)
	return stop
}

// stopAll stops every consumer of the test.
func (e *env) stopAll() {
	for _, stop := range e.stops {
		stop()
	}
}

// msg returns a message of aggregate key with sequence number seq.
func msg(id, key string, seq int) *outbox.Message {
	return &outbox.Message{MessageID: id, AggregateType: "order", AggregateID: key, EventType: "ORDER_PAID",
		Payload: []byte(fmt.Sprintf(`{"order":%q,"seq":%d}`, key, seq)), Headers: map[string]string{"seq": strconv.Itoa(seq)}}
}

// tally is a HookDelivery that counts finished deliveries.
type tally struct {
	mu     sync.Mutex
	events []inbox.DeliveryEvent
	n      atomic.Int64
}

func (c *tally) OnDelivery(ev inbox.DeliveryEvent) {
	c.mu.Lock()
	c.events = append(c.events, ev)
	c.mu.Unlock()
	c.n.Add(1)
}

func (c *tally) count(f func(inbox.DeliveryEvent) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ev := range c.events {
		if f(ev) {
			n++
		}
	}
	return n
}

func (c *tally) waitFor(t *testing.T, n int) {
	testsvc.Eventually(t, waitTimeout, func() bool { return c.n.Load() >= int64(n) },
		"%d deliveries finished, want %d", c.n.Load(), n)
}

// exactlyOnce: every message published 1 to 3 times, consumed by two
// instances at once: one effect each, the rest absorbed as duplicates,
// everything acknowledged, and the message arrives intact.
func exactlyOnce(t *testing.T, b Broker) {
	e := newEnv(t, 2)
	const n = 30
	var msgs []*outbox.Message
	copies := 0
	for i := range n {
		msgs = append(msgs, msg(fmt.Sprintf("eo-%02d", i), fmt.Sprintf("order-%d", i%5), i))
		copies += 1 + i%3
	}
	var mismatch atomic.Value
	check := func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
		want := msgs[mustAtoi(m.Headers["seq"])]
		if m.MessageID != want.MessageID || m.AggregateType != "order" || m.AggregateID != want.AggregateID ||
			m.EventType != "ORDER_PAID" || string(m.Payload) != string(want.Payload) ||
			m.ContentType != want.MediaType() { // the publisher carried it, the consumer handed it back
			mismatch.Store(fmt.Sprintf("got %+v, want %+v", m, want))
		}
		return effect(ctx, tx, m)
	}
	for i := range 2 {
		e.start(t, b.Consumer(t, e.inboxes[i], check, Settings{Concurrency: 3, MaxAttempts: 5,
			RetryBase: 10 * time.Millisecond, Hooks: []inbox.HookDelivery{e.tally}}))
	}
	for c := range 3 {
		var batch []*outbox.Message
		for i, m := range msgs {
			if c <= i%3 {
				batch = append(batch, m)
			}
		}
		b.Publish(t, batch...)
	}
	e.tally.waitFor(t, copies)

	require.Nil(t, mismatch.Load(), "a message arrived changed")
	effects := e.effects(t)
	require.Len(t, effects, n)
	for id, k := range effects {
		require.Equal(t, 1, k, "effects of %s", id)
	}
	require.Equal(t, n, e.tally.count(func(ev inbox.DeliveryEvent) bool { return ev.Outcome == inbox.Processed }))
	require.Equal(t, copies-n, e.tally.count(func(ev inbox.DeliveryEvent) bool { return ev.Outcome == inbox.Duplicate }))
	e.waitDrained(t, b)
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// waitDrained stops the consumers and polls until the broker reports every
// copy acknowledged.
func (e *env) waitDrained(t *testing.T, b Broker) {
	e.stopAll()
	testsvc.Eventually(t, waitTimeout, func() bool { return b.Drained(t) }, "messages left unacknowledged")
}

// retries: a handler that fails twice, then succeeds, has one effect; the
// delivery took three attempts; nothing is dead-lettered.
func retries(t *testing.T, b Broker) {
	e := newEnv(t, 1)
	var runs atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
		if err := effect(ctx, tx, m); err != nil {
			return err
		}
		if runs.Add(1) <= 2 {
			return errors.New("flaky downstream")
		}
		return nil
	}
	e.start(t, b.Consumer(t, e.inboxes[0], h, Settings{Concurrency: 1, MaxAttempts: 5, RetryBase: 10 * time.Millisecond,
		DeadLetter: true, Hooks: []inbox.HookDelivery{e.tally}}))
	b.Publish(t, msg("flaky-1", "order-1", 0))
	e.tally.waitFor(t, 1)
	require.Equal(t, map[string]int{"flaky-1": 1}, e.effects(t))
	require.Equal(t, int64(3), runs.Load())
	e.tally.mu.Lock()
	ev := e.tally.events[0]
	e.tally.mu.Unlock()
	require.Equal(t, inbox.Processed, ev.Outcome)
	require.Equal(t, 3, ev.Attempts)
	require.Empty(t, b.DeadLetters(t))
	e.waitDrained(t, b)
}

// poison: a message whose handler always fails is dead-lettered after
// MaxAttempts, one that fails permanently at once; both keep their id and
// carry the reason; the others are processed; nothing is left unacknowledged
// and the inbox recorded neither.
func poison(t *testing.T, b Broker) {
	e := newEnv(t, 1)
	h := func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
		if err := effect(ctx, tx, m); err != nil {
			return err
		}
		switch m.MessageID {
		case "poison":
			return errors.New("cannot ship to the moon")
		case "undecodable":
			return outbox.Permanent(errors.New("payload is not an order"))
		}
		return nil
	}
	e.start(t, b.Consumer(t, e.inboxes[0], h, Settings{Concurrency: 2, MaxAttempts: 3, RetryBase: 10 * time.Millisecond,
		DeadLetter: true, Hooks: []inbox.HookDelivery{e.tally}}))
	published := []*outbox.Message{msg("ok-1", "order-1", 0), msg("poison", "order-2", 1), msg("undecodable", "order-3", 2),
		msg("ok-2", "order-4", 3)}
	b.Publish(t, published...)
	e.tally.waitFor(t, 4)

	require.Equal(t, map[string]int{"ok-1": 1, "ok-2": 1}, e.effects(t))
	var dead []*outbox.Message
	testsvc.Eventually(t, waitTimeout, func() bool { dead = b.DeadLetters(t); return len(dead) >= 2 }, "dead letters")
	require.Len(t, dead, 2)
	byID := map[string]*outbox.Message{}
	for _, m := range dead {
		byID[m.MessageID] = m
	}
	for _, want := range []struct {
		orig             *outbox.Message
		attempts, reason string
	}{
		{published[1], "3", "cannot ship to the moon"},
		{published[2], "1", "payload is not an order"},
	} {
		id := want.orig.MessageID
		m := byID[id]
		require.NotNil(t, m, "%s was not dead-lettered", id)
		require.Equal(t, want.attempts, m.Headers[inbox.HeaderDeadAttempts], id)
		require.Contains(t, m.Headers[inbox.HeaderDeadReason], want.reason, id)
		require.Equal(t, "shipping", m.Headers[inbox.HeaderDeadConsumer], id)
		require.Equal(t, id, m.Headers[outbox.HeaderMessageID], id)
		require.Equal(t, string(want.orig.Payload), string(m.Payload), id)
		require.Equal(t, want.orig.AggregateID, m.Headers[outbox.HeaderAggregateID], id)
	}
	require.Equal(t, 2, e.tally.count(func(ev inbox.DeliveryEvent) bool { return ev.DeadLettered }))
	var recorded int
	require.NoError(t, e.db.QueryRow("SELECT count(*) FROM inbox_message WHERE message_id IN ('poison', 'undecodable')").Scan(&recorded))
	require.Zero(t, recorded, "a dead-lettered message was recorded as processed")
	e.waitDrained(t, b)
}

// ordered: with per-key ordering and several workers, each key's messages
// are applied in publish order, even when some fail and are retried.
func ordered(t *testing.T, b Broker) {
	e := newEnv(t, 1)
	const keys, perKey = 4, 15
	var mu sync.Mutex
	applied := map[string][]int{}
	var failed sync.Map
	h := func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
		seq := mustAtoi(m.Headers["seq"])
		hs := fnv.New32a()
		hs.Write([]byte(m.MessageID))
		if hs.Sum32()%5 == 0 { // one message in five fails its first run
			if _, loaded := failed.LoadOrStore(m.MessageID, true); !loaded {
				return errors.New("first run fails")
			}
		}
		if err := effect(ctx, tx, m); err != nil {
			return err
		}
		mu.Lock()
		applied[m.AggregateID] = append(applied[m.AggregateID], seq)
		mu.Unlock()
		return nil
	}
	e.start(t, b.Consumer(t, e.inboxes[0], h, Settings{Concurrency: 4, Ordered: true, MaxAttempts: 5,
		RetryBase: 5 * time.Millisecond, Hooks: []inbox.HookDelivery{e.tally}}))
	var msgs []*outbox.Message
	for s := range perKey {
		for k := range keys {
			msgs = append(msgs, msg(fmt.Sprintf("k%d-s%02d", k, s), fmt.Sprintf("order-%d", k), s))
		}
	}
	b.Publish(t, msgs...)
	e.tally.waitFor(t, keys*perKey)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, applied, keys)
	for key, seqs := range applied {
		require.Len(t, seqs, perKey, key)
		for i, s := range seqs {
			require.Equal(t, i, s, "%s applied out of order: %v", key, seqs)
		}
	}
	n := 0
	failed.Range(func(any, any) bool { n++; return true })
	require.Positive(t, n, "no message failed: the test proves less than it claims")
}

// stop: a consumer stopped while a handler runs leaves that message
// unacknowledged (its transaction is cancelled); a new consumer processes it
// once, and Run returns nil.
func stop(t *testing.T, b Broker) {
	e := newEnv(t, 1)
	entered := make(chan struct{})
	var first atomic.Bool
	h := func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
		if err := effect(ctx, tx, m); err != nil {
			return err
		}
		if m.MessageID == "slow" && first.CompareAndSwap(false, true) {
			close(entered)
			<-ctx.Done() // the consumer stops while the handler works
			return ctx.Err()
		}
		return nil
	}
	stopFirst := e.start(t, b.Consumer(t, e.inboxes[0], h, Settings{Concurrency: 1, MaxAttempts: 5, RetryBase: 10 * time.Millisecond}))
	b.Publish(t, msg("slow", "order-1", 0))
	select {
	case <-entered:
	case <-time.After(waitTimeout):
		t.Fatal("the handler never ran")
	}
	stopFirst()
	require.Empty(t, e.effects(t), "the cancelled transaction committed")

	e.start(t, b.Consumer(t, e.inboxes[0], h, Settings{Concurrency: 1, MaxAttempts: 5, RetryBase: 10 * time.Millisecond,
		Hooks: []inbox.HookDelivery{e.tally}}))
	e.tally.waitFor(t, 1)
	require.Equal(t, map[string]int{"slow": 1}, e.effects(t))
	e.waitDrained(t, b)
}

// earlierDeliveries: deliveries the broker counted before (consumers that
// crashed mid-handler) count as attempts, so a message that kills its
// consumers still reaches the dead-letter destination.
func earlierDeliveries(t *testing.T, b Broker) {
	e := newEnv(t, 1)
	b.Publish(t, msg("crashy", "order-1", 0))
	b.(Bouncer).Bounce(t, 2)
	var runs atomic.Int64
	h := func(context.Context, *sql.Tx, *outbox.Message) error {
		runs.Add(1)
		return errors.New("still failing")
	}
	e.start(t, b.Consumer(t, e.inboxes[0], h, Settings{Concurrency: 1, MaxAttempts: 3, RetryBase: 10 * time.Millisecond,
		DeadLetter: true, Hooks: []inbox.HookDelivery{e.tally}}))
	e.tally.waitFor(t, 1)
	require.Equal(t, int64(1), runs.Load(), "the handler ran more than the one attempt left")
	var dead []*outbox.Message
	testsvc.Eventually(t, waitTimeout, func() bool { dead = b.DeadLetters(t); return len(dead) >= 1 }, "dead letter")
	require.Equal(t, "crashy", dead[0].MessageID)
	require.Equal(t, "3", dead[0].Headers[inbox.HeaderDeadAttempts])
	e.waitDrained(t, b)
}
