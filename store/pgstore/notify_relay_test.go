package pgstore_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgstore"
)

// The tests of this file cover the relay's latency paths on PostgreSQL:
// asynchronous commit of the relay's statements, the NOTIFY trigger for
// writers that do not use the Store, the listener's recovery, the cost of an
// idle relay and the coalescing of a burst of notifications.

// uniqueTable returns a table name of its own for t: NOTIFY channels are per
// database, not per schema, so tests that listen must not share a table name.
func uniqueTable(t *testing.T) string { return "n_" + testsvc.Name(t) }

// startRelay runs r until the test ends.
func startRelay(t *testing.T, r *outbox.Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func TestAsyncCommit(t *testing.T) {
	t.Parallel()
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("Async=%v", async), func(t *testing.T) {
			t.Parallel()
			pool, _, _ := testsvc.PostgresSchema(t)
			s := newStore(t, pool, pgstore.WithAsyncCommit(async))
			w := outbox.NewWriter(s)
			ctx := t.Context()
			require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return w.Write(ctx, tx, msg("1"), msg("2"), msg("3"))
			}))
			want := map[bool]string{false: "on", true: "off"}[async]

			// Each relay statement sets synchronous_commit for its own transaction
			// only: seen from inside a transaction that runs it, then gone.
			claimSQL, ackSQL, err := pgstore.RelaySQL(ctx, s)
			require.NoError(t, err)
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck
			show := func() string {
				var v string
				require.NoError(t, tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v))
				return v
			}
			require.Equal(t, "on", show())
			var ids []int64
			var attempts []int32
			rows, err := tx.Query(ctx, claimSQL, 1, time.Minute.Microseconds(), 0, int64(math.MaxInt64), 0)
			require.NoError(t, err)
			for rows.Next() {
				v, err := rows.Values()
				require.NoError(t, err)
				ids, attempts = append(ids, v[0].(int64)), append(attempts, v[1].(int32))
			}
			require.NoError(t, rows.Err())
			require.Len(t, ids, 1)
			require.Equal(t, want, show(), "after the claim")
			require.NoError(t, tx.Rollback(ctx))

			tx, err = pool.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, ackSQL, []int64{1}, []int32{0})
			require.NoError(t, err)
			require.Equal(t, want, show(), "after the ack")
			require.NoError(t, tx.Rollback(ctx))

			var session string
			require.NoError(t, pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&session))
			require.Equal(t, "on", session, "the setting leaked out of the statement's transaction")

			// And the relay works as usual through the Store.
			pub := outboxtest.NewPublisher()
			r, err := outbox.NewRelay(s, pub, outbox.WithOrdering(false, outbox.DeadBlocks), outbox.WithPollInterval(20*time.Millisecond))
			require.NoError(t, err)
			n, err := outboxtest.FlushAndWait(ctx, r, s)
			require.NoError(t, err)
			require.Equal(t, 3, n)
			require.Equal(t, 3, count(t, pool, "SELECT count(*) FROM outbox_message WHERE status = 1 AND retry_count = 1"))
		})
	}
}

// notifications listens on channel with a connection of its own and counts
// what arrives until a NOTIFY with the payload "end".
type notifications struct {
	conn    *pgx.Conn
	channel string
}

func listenTo(t *testing.T, pool *pgxpool.Pool, channel string) *notifications {
	t.Helper()
	conn, err := pgx.ConnectConfig(t.Context(), pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	return &notifications{conn: conn, channel: channel}
}

// countUntilEnd sends the end marker through pool and counts the
// notifications that came before it.
func (n *notifications) countUntilEnd(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	exec(t, pool, "SELECT pg_notify($1, 'end')", n.channel)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got := 0
	for {
		nt, err := n.conn.WaitForNotification(ctx)
		require.NoError(t, err)
		if nt.Payload == "end" {
			return got
		}
		got++
	}
}

func TestNotifyTrigger(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	table := uniqueTable(t)
	s := newStore(t, pool, pgstore.WithTable(table), pgstore.WithNotifyTrigger(true))
	require.NoError(t, s.Migrate(t.Context()), "a second Migrate")
	require.Equal(t, 1, count(t, pool, "SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = 'outbox_notify'", table))

	// A writer that knows nothing of the outbox library: plain INSERTs.
	insert := func(tx pgx.Tx, n int) {
		t.Helper()
		_, err := tx.Exec(t.Context(), fmt.Sprintf(`INSERT INTO %s (message_id, aggregate_type, aggregate_id, event_type, payload)
			SELECT gen_random_uuid()::text, 'order', g::text, 'ORDER_PAID', '{}' FROM generate_series(1, $1) g`, table), n)
		require.NoError(t, err)
	}
	ln := listenTo(t, pool, table)
	cases := []struct {
		name       string
		statements []int // rows per INSERT statement, all in one transaction
		want       int
	}{
		{"OneStatementOfManyRows", []int{500}, 1},
		{"ThreeStatementsOneTransaction", []int{1, 20, 300}, 1},
		{"NoRows", []int{0}, 1},
	}
	for _, tc := range cases {
		require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			for _, n := range tc.statements {
				insert(tx, n)
			}
			return nil
		}), tc.name)
		require.Equal(t, tc.want, ln.countUntilEnd(t, pool), tc.name)
	}
	// A rolled-back transaction notifies no one.
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	insert(tx, 5)
	require.NoError(t, tx.Rollback(t.Context()))
	require.Zero(t, ln.countUntilEnd(t, pool), "rolled back")

	// The Store's own writes leave the NOTIFY to the trigger: still one per transaction.
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return outbox.NewWriter(s).Write(t.Context(), tx, msg("a"), msg("b"))
	}))
	require.Equal(t, 1, ln.countUntilEnd(t, pool), "the Store's own write")

	// A relay that would otherwise sleep for an hour publishes a plain INSERT at once.
	exec(t, pool, fmt.Sprintf("DELETE FROM %s", table))
	pub := outboxtest.NewPublisher()
	r, err := outbox.NewRelay(s, pub, outbox.WithOrdering(false, outbox.DeadBlocks), outbox.WithPollInterval(time.Hour))
	require.NoError(t, err)
	startRelay(t, r)
	testsvc.Eventually(t, 10*time.Second, func() bool {
		return count(t, pool, "SELECT count(*) FROM pg_stat_activity WHERE query = $1", "LISTEN "+pgx.Identifier{table}.Sanitize()) >= 2
	}, "relay listening")
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { insert(tx, 7); return nil }))
	testsvc.Eventually(t, 10*time.Second, func() bool { return pub.Count() == 7 }, "plain inserts published")
}

// TestNotifyTriggerMissing: a Store that leaves the NOTIFY to a trigger
// the table does not have refuses to listen with an error that says what to
// run, instead of listening for notifications that never come; once the
// trigger is there, it listens.
func TestNotifyTriggerMissing(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	table := uniqueTable(t)
	newStore(t, pool, pgstore.WithTable(table)) // migrated without the trigger
	s, err := pgstore.New(pool, pgstore.WithTable(table), pgstore.WithNotifyTrigger(true))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = s.Listen(ctx, func() {})
	require.ErrorContains(t, err, "has no NOTIFY trigger")
	require.ErrorContains(t, err, "outbox migrate --notify-trigger")

	require.NoError(t, s.Migrate(t.Context()))
	woken := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- s.Listen(ctx, func() {
			select {
			case woken <- struct{}{}:
			default:
			}
		})
	}()
	select {
	case <-woken: // the wake-up right after it starts listening
	case err := <-done:
		t.Fatalf("Listen returned %v", err)
	}
	cancel()
	require.NoError(t, <-done)
}

// TestRelayListenerRecovers terminates the relay's listening connection: the
// relay starts listening again by itself and, because rows may have
// committed while no one listened, looks for them at once.
func TestRelayListenerRecovers(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	table := uniqueTable(t)
	s := newStore(t, pool, pgstore.WithTable(table), pgstore.WithNotify(true))
	w := outbox.NewWriter(s)
	pub := outboxtest.NewPublisher()
	r, err := outbox.NewRelay(s, pub, outbox.WithOrdering(false, outbox.DeadBlocks), outbox.WithPollInterval(time.Hour))
	require.NoError(t, err)
	startRelay(t, r)
	listenSQL := "LISTEN " + pgx.Identifier{table}.Sanitize()
	listener := func() int {
		var pid int
		err := pool.QueryRow(t.Context(), "SELECT COALESCE(max(pid), 0) FROM pg_stat_activity WHERE query = $1", listenSQL).Scan(&pid)
		require.NoError(t, err)
		return pid
	}
	testsvc.Eventually(t, 10*time.Second, func() bool { return listener() != 0 }, "relay listening")
	first := listener()

	exec(t, pool, "SELECT pg_terminate_backend($1)", first)
	// Written while the listener is down: no notification reaches the relay.
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, msg("gap")) }))
	testsvc.Eventually(t, 15*time.Second, func() bool { return pub.Count() == 1 }, "message written during the gap")
	testsvc.Eventually(t, 10*time.Second, func() bool { p := listener(); return p != 0 && p != first }, "listening again")
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, msg("after")) }))
	testsvc.Eventually(t, 10*time.Second, func() bool { return pub.Count() == 2 }, "message after recovery")
}

// sqlCounter counts the round trips a pool makes: each statement sent on its
// own (except LISTEN), and each batch of statements sent at once; beats
// counts those of them on the table of relays (heartbeats).
type sqlCounter struct{ n, beats atomic.Int64 }

func (c *sqlCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.HasPrefix(d.SQL, "LISTEN ") {
		c.n.Add(1)
	}
	if strings.Contains(d.SQL, "_relays") {
		c.beats.Add(1)
	}
	return ctx
}
func (c *sqlCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *sqlCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *sqlCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *sqlCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestIdleRelayCost counts every round trip an idle relay makes to
// PostgreSQL over two seconds: one claim per poll interval, with and without
// notifications (the listener's LISTEN aside) and with batch leases (whose
// claim is one round trip of a few statements). An ordered relay also
// heartbeats into the table of relays, one statement every third of its TTL
// (here 600 ms, to see several; 10 s by default), counted apart.
func TestIdleRelayCost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                         string
		notify, lease, held, ordered bool
	}{{"Polling", false, false, false, false}, {"Notify", true, false, false, false},
		{"NotifyBatchLease", true, true, false, false}, {"NotifyHeldClaims", true, false, true, false},
		{"OrderedPolling", false, false, false, true}} {
		notify := tc.notify
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, counter, _ := countedStore(t, pgstore.WithNotify(notify), pgstore.WithBatchLease(tc.lease),
				pgstore.WithHeldClaims(tc.held))
			const poll, window, ttl = 200 * time.Millisecond, 2 * time.Second, 600 * time.Millisecond
			r, err := outbox.NewRelay(s, outboxtest.NewPublisher(), outbox.WithOrdering(tc.ordered, outbox.DeadBlocks),
				outbox.WithPollInterval(poll), outbox.WithRelayTTL(ttl))
			require.NoError(t, err)
			before, beatsBefore := counter.n.Load(), counter.beats.Load()
			startRelay(t, r)
			// An observation window, not a wait for a condition.
			<-time.After(window)
			beats := counter.beats.Load() - beatsBefore
			got := counter.n.Load() - before - beats
			t.Logf("%d round trips and %d heartbeats in %v at a poll interval of %v", got, beats, window, poll)
			require.LessOrEqual(t, got, int64(window/poll)+1, "an idle relay costs at most one claim per poll interval")
			require.GreaterOrEqual(t, got, int64(window/poll)/2, "the relay did not poll")
			if !tc.ordered {
				require.Zero(t, beats, "an unordered relay does not heartbeat")
				return
			}
			// One at start, then every ttl/3 ± 20%.
			require.LessOrEqual(t, beats, int64(window/(ttl/3*8/10))+1, "one statement per heartbeat")
			require.GreaterOrEqual(t, beats, int64(2), "the relay did not heartbeat")
		})
	}
}

// countedStore returns a store on a table of its own whose pool counts its
// round trips, that counter, and a pool without it on the same schema for
// writes the count must leave out. The store has made its one-time queries
// (the table's columns, the first claim's check for batch leases) already.
func countedStore(t *testing.T, opts ...pgstore.Option) (*pgstore.Store, *sqlCounter, *pgxpool.Pool) {
	t.Helper()
	base, _, _ := testsvc.PostgresSchema(t)
	counter := &sqlCounter{}
	cfg := base.Config().Copy()
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := newStore(t, pool, append([]pgstore.Option{pgstore.WithTable(uniqueTable(t))}, opts...)...)
	_, err = s.Stats(t.Context()) // learn the table's columns first
	require.NoError(t, err)
	// and make the first claim's one-time check for batch leases (the table is empty)
	_, err = s.Claim(t.Context(), outbox.ClaimParams{Limit: 1, Lease: time.Minute})
	require.NoError(t, err)
	return s, counter, base
}

// TestIdleRelayCostAfterTrickle: a relay that served a trickle (a message
// every 5 ms for a fifth of a second, no notifications) backs off once it
// stops, in a few dozen claims rather than one per minimum poll interval,
// and is then back at one claim per poll interval, counted as round trips
// to PostgreSQL over two seconds.
func TestIdleRelayCostAfterTrickle(t *testing.T) {
	t.Parallel()
	s, counter, base := countedStore(t)
	const poll, window, n = 200 * time.Millisecond, 2 * time.Second, 40
	pub := outboxtest.NewPublisher()
	r, err := outbox.NewRelay(s, pub, outbox.WithOrdering(false, outbox.DeadBlocks), outbox.WithPollInterval(poll))
	require.NoError(t, err)
	startRelay(t, r)
	w := outbox.NewWriter(s)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		require.NoError(t, pgx.BeginFunc(t.Context(), base, func(tx pgx.Tx) error {
			return w.Write(t.Context(), tx, msg(fmt.Sprint(i)))
		}))
	}
	testsvc.Eventually(t, 10*time.Second, func() bool { return pub.Count() == n }, "the trickle published")

	// Backing off: the wait reaches the poll interval 4 intervals after the
	// last claim that found rows, after about 25 empty claims (2 ms apart
	// at first, then a quarter of the quiet time). Observation windows, not
	// waits for a condition.
	before := counter.n.Load()
	<-time.After(4*poll + poll/2)
	backingOff := counter.n.Load() - before
	before = counter.n.Load()
	<-time.After(window)
	idle := counter.n.Load() - before
	t.Logf("%d round trips while backing off, then %d in %v at a poll interval of %v", backingOff, idle, window, poll)
	require.LessOrEqual(t, backingOff, int64(50), "backing off")
	require.LessOrEqual(t, idle, int64(window/poll)+1, "an idle relay costs at most one claim per poll interval")
	require.GreaterOrEqual(t, idle, int64(window/poll)/2, "the relay did not poll")
}

// claimCounter counts the claims that returned rows.
type claimCounter struct {
	outbox.Store
	withRows atomic.Int64
}

func (c *claimCounter) Claim(ctx context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	cl, err := c.Store.Claim(ctx, p)
	if err == nil && len(cl.Messages) > 0 {
		c.withRows.Add(1)
	}
	return cl, err
}

// Listen passes the store's notifications through (the wrapper hides the interface otherwise).
func (c *claimCounter) Listen(ctx context.Context, wake func()) error {
	return c.Store.(outbox.Notifier).Listen(ctx, wake)
}

// heldPublisher holds the first Publish until released.
type heldPublisher struct {
	*outboxtest.Publisher
	once     sync.Once
	started  chan struct{}
	released chan struct{}
}

func (p *heldPublisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	p.once.Do(func() {
		close(p.started)
		<-p.released
	})
	return p.Publisher.Publish(ctx, msgs)
}

// TestNotifyBurstIsOneClaim: while the relay is busy with a batch, fifty
// transactions commit, each with its own notification. When the relay is
// free again, one claim takes all fifty messages.
func TestNotifyBurstIsOneClaim(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	s := newStore(t, pool, pgstore.WithTable(uniqueTable(t)), pgstore.WithNotify(true))
	w := outbox.NewWriter(s)
	write := func(id string) error {
		return pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, msg(id)) })
	}
	st := &claimCounter{Store: s}
	pub := &heldPublisher{Publisher: outboxtest.NewPublisher(), started: make(chan struct{}), released: make(chan struct{})}
	// One batch at a time, large enough for the burst: the sizing would
	// otherwise claim it in growing batches (10, 20, 20) and beside the first.
	r, err := outbox.NewRelay(st, pub, outbox.WithOrdering(false, outbox.DeadBlocks), outbox.WithPollInterval(time.Hour), outbox.WithBatchSize(100),
		outbox.WithMaxInFlight(1))
	require.NoError(t, err)
	startRelay(t, r)

	require.NoError(t, write("first"))
	select {
	case <-pub.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first message was not published")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() { errs <- write(fmt.Sprint(i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	close(pub.released)
	testsvc.Eventually(t, 10*time.Second, func() bool { return pub.Count() == 51 }, "the burst published")
	require.EqualValues(t, 2, st.withRows.Load(), "claims that found rows: the first message, then the whole burst")
}

// TestNotifyInterval counts the notifications of six write transactions: one
// each without an interval, one in all with an interval longer than the test.
func TestNotifyInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		interval time.Duration
		want     int
	}{{"EveryWrite", 0, 6}, {"Coalesced", time.Hour, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, _, _ := testsvc.PostgresSchema(t)
			table := uniqueTable(t)
			s := newStore(t, pool, pgstore.WithTable(table), pgstore.WithNotify(true), pgstore.WithNotifyInterval(tc.interval))
			ln := listenTo(t, pool, table)
			w := outbox.NewWriter(s)
			for i := range 6 {
				require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
					return w.Write(t.Context(), tx, msg(fmt.Sprint(i)))
				}))
			}
			require.Equal(t, tc.want, ln.countUntilEnd(t, pool))
			require.Equal(t, 6, count(t, pool, "SELECT count(*) FROM "+table))
		})
	}
}
