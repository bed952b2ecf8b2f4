// Package outbox_test here holds the tests of package outbox that need a real store (SQLite): the relay under load,
// deadlines, pipelining, claim hooks and the runnable examples. They live in the e2e module so that the root module
// requires no store (docs/modules.md); the root keeps the tests that need none.
package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// bundle is a migrated SQLite outbox with a writer and raw access.
type bundle struct {
	db    *sql.DB
	store *sqlitestore.Store
	w     *outbox.Writer[*sql.Tx]
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db, err := sqlitestore.Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	st, err := sqlitestore.New(db)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(context.Background()))
	return &bundle{db: db, store: st, w: outbox.NewWriter[*sql.Tx](st)}
}

func (b *bundle) write(t *testing.T, msgs ...*outbox.Message) {
	t.Helper()
	tx, err := b.db.Begin()
	require.NoError(t, err)
	require.NoError(t, b.w.Write(context.Background(), tx, msgs...))
	require.NoError(t, tx.Commit())
}

func (b *bundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow("SELECT count(*) FROM outbox_message WHERE "+where, args...).Scan(&n))
	return n
}

func msg(agg string, i int) *outbox.Message {
	return &outbox.Message{AggregateType: "order", AggregateID: agg, EventType: "ORDER_PAID",
		Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
}

func many(n int) []*outbox.Message {
	out := make([]*outbox.Message, n)
	for i := range out {
		out[i] = msg(fmt.Sprintf("o-%d", i%7), i)
	}
	return out
}

func fastRelay(t *testing.T, st outbox.Store, p outbox.Publisher, opts ...outbox.RelayOption) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(st, p, append([]outbox.RelayOption{
		outbox.WithPollInterval(10 * time.Millisecond), outbox.WithBackoff(time.Millisecond, 5*time.Millisecond),
		outbox.WithProbeInterval(10*time.Millisecond, 50*time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	return r
}

func run(t *testing.T, r *outbox.Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestRelayDeliversEverythingOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, many(250)...)
	pub := outboxtest.NewPublisher()
	run(t, fastRelay(t, b.store, pub, outbox.WithBatchSize(40)))
	testsvc.Eventually(t, 10*time.Second, func() bool { return pub.Count() >= 250 }, "deliveries")
	testsvc.Eventually(t, 5*time.Second, func() bool { return b.count(t, "status = 1") == 250 }, "acks")
	require.Empty(t, pub.Duplicates())
	require.Equal(t, 250, b.count(t, "retry_count = 1"))
}

func TestRelayDeleteSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, many(30)...)
	pub := outboxtest.NewPublisher()
	r := fastRelay(t, b.store, pub, outbox.WithDeleteSent(true))
	n, err := outboxtest.FlushAndWait(context.Background(), r, b.store)
	require.NoError(t, err)
	require.Equal(t, 30, n)
	require.Zero(t, b.count(t, "1=1"))
}

// blockingPublisher holds each Publish until released, to stop the relay mid-batch.
type blockingPublisher struct {
	*outboxtest.Publisher
	started chan int
	release chan struct{}
}

func (p *blockingPublisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	p.started <- len(msgs)
	<-p.release
	return p.Publisher.Publish(ctx, msgs)
}

func TestRelayShutdownFinishesBatchInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, many(50)...)
	pub := &blockingPublisher{Publisher: outboxtest.NewPublisher(), started: make(chan int, 1), release: make(chan struct{})}
	r := fastRelay(t, b.store, pub, outbox.WithBatchSize(20), outbox.WithPublishTimeout(2*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	n := <-pub.started
	cancel() // shutdown while the batch is at the broker
	select {
	case <-done:
		t.Fatal("Run returned before the batch in flight was finished")
	case <-time.After(100 * time.Millisecond):
	}
	close(pub.release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not return within the publish timeout")
	}
	require.Equal(t, n, pub.Count())
	require.Equal(t, n, b.count(t, "status = 1"), "the batch in flight was acknowledged")
	require.Equal(t, 50-n, b.count(t, "status = 0 AND retry_count = 0"), "nothing new was claimed")
}

type destHook struct{ downs, ups atomic.Int32 }

func (h *destHook) OnDestination(up bool, _ error) {
	if up {
		h.ups.Add(1)
	} else {
		h.downs.Add(1)
	}
}

func TestRelayDestinationDownSpendsNoAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, many(20)...)
	pub := outboxtest.NewPublisher()
	pub.FailWith(func(*outbox.Message) error { return outbox.Unavailable(errors.New("connection refused")) })
	hook := &destHook{}
	run(t, fastRelay(t, b.store, pub, outbox.WithMaxAttempts(2), outbox.WithHooks(hook)))
	testsvc.Eventually(t, 5*time.Second, func() bool { return hook.downs.Load() > 0 }, "destination down")
	time.Sleep(300 * time.Millisecond) // many probe cycles, each at most one message
	require.Zero(t, b.count(t, "status = 2"), "an outage killed messages")
	require.Zero(t, b.count(t, "retry_count > 1"), "an outage spent attempts")
	pub.FailWith(nil)
	testsvc.Eventually(t, 5*time.Second, func() bool { return b.count(t, "status = 1") == 20 }, "all sent after recovery")
	require.EqualValues(t, 1, hook.ups.Load())
}

func TestRelayRetriesThenKills(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		err         error
		wantAttempt int
		wantReason  string
	}{
		{"Transient", errors.New("nack"), 3, "gave up after 3 attempts: nack"},
		{"Permanent", outbox.Permanent(errors.New("message too large")), 1, "message too large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			poison := msg("p", 0)
			b.write(t, append([]*outbox.Message{poison}, many(20)...)...)
			pub := outboxtest.NewPublisher()
			pub.FailWith(func(m *outbox.Message) error {
				if m.MessageID == poison.MessageID {
					return tc.err
				}
				return nil
			})
			r := fastRelay(t, b.store, pub, outbox.WithMaxAttempts(3))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := outboxtest.FlushAndWait(ctx, r, b.store)
			require.NoError(t, err)
			require.Equal(t, 20, pub.Count(), "the poison message blocked others")
			var attempt int
			var reason string
			require.NoError(t, b.db.QueryRow("SELECT retry_count, last_error FROM outbox_message WHERE status = 2").
				Scan(&attempt, &reason))
			require.Equal(t, tc.wantAttempt, attempt)
			require.Contains(t, reason, tc.wantReason)
		})
	}
}

func TestRelayCountsAttemptsThatNeverFinished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, msg("a", 1))
	pub := outboxtest.NewPublisher()
	crashing := outboxtest.NewCrashingStore(b.store, outboxtest.CrashBeforePublish, 3)
	r := fastRelay(t, crashing, pub, outbox.WithMaxAttempts(3))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := outboxtest.FlushAndWait(ctx, r, crashing)
	require.NoError(t, err)
	require.Zero(t, pub.Count())
	require.Equal(t, 3, crashing.Crashes())
	var reason string
	require.NoError(t, b.db.QueryRow("SELECT last_error FROM outbox_message WHERE status = 2 AND retry_count = 4").Scan(&reason))
	require.Contains(t, reason, "attempts exhausted")
}

func TestRelayMarksMalformedRowsDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, many(5)...)
	// Another program wrote rows the relay cannot send.
	_, err := b.db.Exec(`INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ('bad-json', 'order', '1', 'ORDER_PAID', '{"oops":'), ('bad-utf8', 'order', '1', 'ORDER_PAID', '"` + "\xff" + `"')`)
	require.NoError(t, err)
	pub := outboxtest.NewPublisher()
	r := fastRelay(t, b.store, pub)
	_, err = outboxtest.FlushAndWait(context.Background(), r, b.store)
	require.NoError(t, err)
	require.Equal(t, 5, pub.Count())
	require.Equal(t, 2, b.count(t, "status = 2 AND last_error IS NOT NULL"))
}

func TestCrashAfterPublishDuplicatesTheBatch(t *testing.T) {
	t.Parallel()
	for _, point := range []outboxtest.CrashPoint{outboxtest.CrashAfterPublish, outboxtest.CrashDuringAck} {
		t.Run(point.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.write(t, many(10)...)
			pub := outboxtest.NewPublisher()
			crashing := outboxtest.NewCrashingStore(b.store, point, 1)
			r := fastRelay(t, crashing, pub, outbox.WithBatchSize(4))
			_, err := outboxtest.FlushAndWait(context.Background(), r, crashing)
			require.NoError(t, err)
			require.Equal(t, 14, pub.Count(), "the crashed batch of 4 is delivered twice")
			require.Len(t, pub.Duplicates(), 4)
			require.Equal(t, 10, b.count(t, "status = 1"))
		})
	}
}

func TestRelayOrderingKeepsAggregateOrderAcrossRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var all []*outbox.Message
	for i := range 30 {
		all = append(all, msg(fmt.Sprintf("agg-%d", i%3), i))
	}
	b.write(t, all...)
	pub := outboxtest.NewPublisher()
	var failed sync.Map
	pub.FailWith(func(m *outbox.Message) error { // the first attempt of every 4th message fails
		if m.Attempt == 1 && len(m.Payload)%4 == 0 {
			if _, loaded := failed.LoadOrStore(m.MessageID, true); !loaded {
				return errors.New("transient")
			}
		}
		return nil
	})
	r := fastRelay(t, b.store, pub, outbox.WithOrdering(true, outbox.DeadBlocks), outbox.WithBatchSize(10))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := outboxtest.FlushAndWait(ctx, r, b.store)
	require.NoError(t, err)
	last := map[string]int64{}
	for _, m := range pub.Messages() {
		require.Greater(t, m.RowID, last[m.AggregateID], "aggregate %s out of order", m.AggregateID)
		last[m.AggregateID] = m.RowID
	}
	require.Equal(t, 30, pub.Count())
}

func TestRelayRunTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, msg("a", 1))
	pub := outboxtest.NewPublisher()
	published := make(chan struct{}, 1)
	pub.OnDeliver(func(*outbox.Message) {
		select {
		case published <- struct{}{}:
		default:
		}
	})
	r := fastRelay(t, b.store, pub)
	stop := run(t, r)
	<-published // the first Run is running: it has published
	require.ErrorIs(t, r.Run(context.Background()), outbox.ErrRunning)
	stop()
}

// blockingClaims is a store whose claims wait until their context ends.
type blockingClaims struct {
	outbox.Store
	waiting chan struct{}
}

func (s *blockingClaims) Claim(ctx context.Context, _ outbox.ClaimParams) (*outbox.Claim, error) {
	select {
	case s.waiting <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

type batchErrors struct{ n atomic.Int32 }

func (h *batchErrors) OnBatch(ev outbox.BatchEvent) {
	if ev.Err != nil {
		h.n.Add(1)
	}
}

// TestStopDuringClaimIsNoStoreError: a claim that the relay's stop cuts short
// is not reported to the hooks as a failed cycle (the metrics would count a
// store error at every shutdown that lands on a claim).
func TestStopDuringClaimIsNoStoreError(t *testing.T) {
	t.Parallel()
	st := &blockingClaims{Store: setup(t).store, waiting: make(chan struct{}, 1)}
	hook := &batchErrors{}
	r, err := outbox.NewRelay(st, outboxtest.NewPublisher(), outbox.WithHooks(hook))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-st.waiting
	cancel()
	require.NoError(t, <-done)
	require.Zero(t, hook.n.Load(), "the cut-short claim was reported as a store error")
}
