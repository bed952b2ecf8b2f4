package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
)

// orderedFixture is a migrated table whose pool counts its statements.
type orderedFixture struct {
	pool    *pgxpool.Pool
	store   *pgstore.Store
	counter *statementCounter
}

func newOrderedFixture(t *testing.T, opts ...pgstore.Option) *orderedFixture {
	t.Helper()
	base, _, _ := testsvc.PostgresSchema(t)
	counter := &statementCounter{}
	cfg := base.Config().Copy()
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// These tests are of the heads claim, which runs claims fall back on
	// (runs_test.go has the runs claim's).
	opts = append([]pgstore.Option{pgstore.WithHeadsOnlyClaims()}, opts...)
	return &orderedFixture{pool: pool, store: newStore(t, pool, opts...), counter: counter}
}

// write commits n messages of aggregate agg, numbered from 0 in the payload.
func (f *orderedFixture) write(t *testing.T, agg string, n int) {
	t.Helper()
	w := outbox.NewWriter(f.store)
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{AggregateType: "order", AggregateID: agg, EventType: "E", Payload: fmt.Appendf(nil, "%d", i)}
	}
	require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, msgs...) }))
}

// writeInterleaved commits n messages for each of aggs in one transaction,
// round robin: message i of every aggregate before message i+1 of any.
func (f *orderedFixture) writeInterleaved(t *testing.T, aggs []string, n int) {
	t.Helper()
	var msgs []*outbox.Message
	for i := range n {
		for _, agg := range aggs {
			msgs = append(msgs, &outbox.Message{AggregateType: "order", AggregateID: agg, EventType: "E", Payload: fmt.Appendf(nil, "%d", i)})
		}
	}
	w := outbox.NewWriter(f.store)
	require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, msgs...) }))
}

// claim makes an ordered claim and returns "agg#n" of each message, and how
// many statements it took.
func (f *orderedFixture) claim(t *testing.T, limit int, blockOnDead bool) ([]string, []*outbox.Message, int64) {
	t.Helper()
	before := f.counter.n.Load()
	c, err := f.store.Claim(t.Context(), outbox.ClaimParams{Limit: limit, Lease: time.Hour, Ordered: true, BlockOnDead: blockOnDead})
	require.NoError(t, err)
	require.Empty(t, c.Malformed)
	var got []string
	for _, m := range c.Messages {
		got = append(got, fmt.Sprintf("%s#%s", m.AggregateID, m.Payload))
	}
	return got, c.Messages, f.counter.n.Load() - before
}

func (f *orderedFixture) ack(t *testing.T, msgs []*outbox.Message) {
	t.Helper()
	n, err := f.store.Ack(t.Context(), outbox.AckParams{Messages: msgs})
	require.NoError(t, err)
	require.Equal(t, len(msgs), n)
}

// TestOrderedClaimBeyondTheWindow writes a deep backlog of one aggregate
// ahead of twenty others: the heads of the others lie far beyond the rows
// the walk looks at, and the skip scan of the head index finds them. Having
// gone through all 21 aggregates, fewer than the limit, the skip scan then
// runs alone. It runs with and without WithAsyncCommit, whose filter every
// statement carries.
func TestOrderedClaimBeyondTheWindow(t *testing.T) {
	t.Parallel()
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("AsyncCommit=%v", async), func(t *testing.T) {
			t.Parallel()
			f := newOrderedFixture(t, pgstore.WithAsyncCommit(async))
			f.write(t, "hot", 1000)
			want := []string{"hot#0"}
			for i := range 20 {
				agg := fmt.Sprintf("a-%02d", i)
				f.write(t, agg, 2)
				want = append(want, agg+"#0")
			}
			got, msgs, _ := f.claim(t, 50, true) // the first ordered claim also looks for the head index
			require.Equal(t, want, got)
			f.ack(t, msgs)
			got, _, stmts := f.claim(t, 50, true)
			require.Len(t, got, 21)
			require.Equal(t, "hot#1", got[0])
			require.EqualValues(t, 1, stmts, "the skip scan alone: 21 aggregates fit in one claim")
		})
	}
}

// TestOrderedClaimRoundRobin gives four aggregates deep backlogs, one after
// the other, and claims two rows at a time: the walk always finds the first
// aggregate's head, and the skip scan hands the second place to the other
// aggregates in turn, so none waits for another to drain.
func TestOrderedClaimRoundRobin(t *testing.T) {
	t.Parallel()
	f := newOrderedFixture(t)
	for _, agg := range []string{"a", "b", "c", "d"} {
		f.write(t, agg, 300)
	}
	var got []string
	for range 6 {
		batch, msgs, _ := f.claim(t, 2, false)
		got = append(got, batch...)
		f.ack(t, msgs)
	}
	require.Equal(t, []string{"a#0", "b#0", "a#1", "c#0", "a#2", "d#0", "a#3", "b#1", "a#4", "c#1", "a#5", "d#1"}, got)
}

// TestOrderedClaimFewAggregatesSkipsTheWalk gives three aggregates a deep,
// interleaved backlog, the shape where every claim is short while other
// relays hold heads: once a skip scan has gone through every aggregate, and
// they are fewer than the limit, a claim is the skip scan alone (one
// statement) and takes every head there is and nothing else; when more
// aggregates turn up than the limit, claims go back to the walk.
func TestOrderedClaimFewAggregatesSkipsTheWalk(t *testing.T) {
	t.Parallel()
	f := newOrderedFixture(t)
	f.writeInterleaved(t, []string{"a", "b", "c"}, 300) // 900 rows: deeper than the window
	_, a0, _ := f.claim(t, 1, true)                     // another relay holds a#0 (learns the head index, too)
	require.Equal(t, "a", a0[0].AggregateID)

	steps := []struct {
		name      string
		before    func(t *testing.T)
		want      []string
		wantStmts int64
	}{
		{name: "ShortClaimWalksThenScansEveryAggregate", want: []string{"b#0", "c#0"}, wantStmts: 2},
		{name: "ThenTheSkipScanAloneFindsNothingHeld", want: nil, wantStmts: 1},
		{name: "AndTakesTheNextHeadsOnceAcknowledged", before: func(t *testing.T) { f.ack(t, a0) },
			want: []string{"a#1"}, wantStmts: 1},
		{name: "MoreAggregatesThanTheLimitFillTheClaim", before: func(t *testing.T) {
			for i := range 12 {
				f.write(t, fmt.Sprintf("x-%02d", i), 1)
			}
		}, want: []string{"x-00#0", "x-01#0", "x-02#0", "x-03#0", "x-04#0", "x-05#0", "x-06#0", "x-07#0", "x-08#0", "x-09#0"},
			wantStmts: 1},
		{name: "SoTheNextClaimWalksAgain", want: []string{"x-10#0", "x-11#0"}, wantStmts: 2},
	}
	for _, st := range steps { // in order: each step starts where the last one left the table
		if st.before != nil {
			st.before(t)
		}
		got, _, stmts := f.claim(t, 10, true)
		require.Equal(t, st.want, got, st.name)
		require.Equal(t, st.wantStmts, stmts, "%s: statements", st.name)
	}
}

// TestOrderedWalkProbesEachAggregateOnce runs the walk over a window that
// holds three aggregates: only the first row of each aggregate in the window
// can be a head (the others have that row pending before them), so the walk
// probes the head index three times, not once per row of the window.
func TestOrderedWalkProbesEachAggregateOnce(t *testing.T) {
	t.Parallel()
	for _, async := range []bool{false, true} {
		// WithAsyncCommit adds a filter (set_config) to the statement; where it
		// stands must not change the plan of the probes.
		t.Run(map[bool]string{false: "SyncCommit", true: "AsyncCommit"}[async], func(t *testing.T) {
			t.Parallel()
			orderedWalkProbes(t, newOrderedFixture(t, pgstore.WithAsyncCommit(async)))
		})
	}
}

func orderedWalkProbes(t *testing.T, f *orderedFixture) {
	f.writeInterleaved(t, []string{"a", "b", "c"}, 200)
	exec(t, f.pool, "ANALYZE outbox_message")
	walk, err := pgstore.OrderedWalkSQL(t.Context(), f.store, true)
	require.NoError(t, err)
	const limit = 10
	window := pgstore.OrderedWindow(limit)
	require.Less(t, window, 600, "the backlog is deeper than the window")

	tx, err := f.pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(t.Context())) }() // EXPLAIN ANALYZE runs the claim: undo it
	var plan []map[string]any
	require.NoError(t, tx.QueryRow(t.Context(), "EXPLAIN (ANALYZE, FORMAT JSON) "+walk, limit, time.Hour.Microseconds(), window, 0).
		Scan(&plan))
	probes := 0.0
	var visit func(n map[string]any)
	visit = func(n map[string]any) {
		if n["Alias"] == "p" { // the "no earlier row" probe, whichever scan the planner picked
			probes += n["Actual Loops"].(float64)
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			visit(c.(map[string]any))
		}
	}
	visit(plan[0]["Plan"].(map[string]any))
	require.EqualValues(t, 3, probes, "probes for a window of %d rows:\n%v", window, plan)
}

// TestOrderedClaimDeadPolicyBeyondTheWindow checks that the skip scan keeps
// the dead policy: a dead head blocks its aggregate only with BlockOnDead.
func TestOrderedClaimDeadPolicyBeyondTheWindow(t *testing.T) {
	t.Parallel()
	f := newOrderedFixture(t)
	f.write(t, "hot", 400)
	f.write(t, "b", 3)
	got, msgs, _ := f.claim(t, 10, true)
	require.Equal(t, []string{"hot#0", "b#0"}, got)
	require.NoError(t, f.store.Kill(t.Context(), outbox.KillParams{Dead: []outbox.Dead{{Message: msgs[1], Reason: "poison"}}}))
	f.ack(t, msgs[:1])

	got, msgs, _ = f.claim(t, 10, true)
	require.Equal(t, []string{"hot#1"}, got, "the dead b#0 holds b#1 back")
	f.ack(t, msgs)
	got, _, _ = f.claim(t, 10, false)
	require.Equal(t, []string{"hot#2", "b#1"}, got, "without BlockOnDead b#1 goes past the dead b#0")
}

// TestOrderedClaimIsOneStatementWhenTheBacklogIsShort checks that an ordered
// claim over a backlog within the walk's window, the usual case, costs one
// statement, as an unordered claim does; so does an idle relay's claim.
func TestOrderedClaimIsOneStatementWhenTheBacklogIsShort(t *testing.T) {
	t.Parallel()
	f := newOrderedFixture(t)
	f.write(t, "a", 5)
	f.write(t, "b", 5)
	_, msgs, _ := f.claim(t, 100, true) // learns the table
	require.Len(t, msgs, 2)
	f.ack(t, msgs)
	for range 4 {
		got, msgs, stmts := f.claim(t, 100, true)
		require.Len(t, got, 2)
		require.EqualValues(t, 1, stmts)
		f.ack(t, msgs)
	}
	got, _, stmts := f.claim(t, 100, true)
	require.Empty(t, got)
	require.EqualValues(t, 1, stmts, "an idle ordered claim")
}

// contractFixture returns a fixture on a schema of the test's own whose
// store (opened with opts) reads a table a team made with only the
// contract's columns and indexes, team_outbox.
func contractFixture(t *testing.T, opts ...pgstore.Option) *orderedFixture {
	t.Helper()
	base, _, _ := testsvc.PostgresSchema(t)
	exec(t, base, fmt.Sprintf(contractDDL, "team_outbox", "jsonb", "timestamptz"))
	s, err := pgstore.New(base, append([]pgstore.Option{pgstore.WithTable("team_outbox")}, opts...)...)
	require.NoError(t, err)
	return &orderedFixture{pool: base, store: s, counter: &statementCounter{}}
}

// TestOrderedClaimWithoutTheHeadIndex runs ordered claims on a team's table
// that has only the contract's indexes: the window of the first due rows
// gives the head of the aggregate at the front; the heads behind it come
// from a read of the whole backlog when the window gives none.
func TestOrderedClaimWithoutTheHeadIndex(t *testing.T) {
	t.Parallel()
	f := contractFixture(t, pgstore.WithHeadsOnlyClaims())
	base := f.pool
	f.write(t, "hot", 400)
	f.write(t, "b", 2)
	got, hot, _ := f.claim(t, 10, true)
	require.Equal(t, []string{"hot#0"}, got, "the window's head")
	got, b, _ := f.claim(t, 10, true)
	require.Equal(t, []string{"b#0"}, got, "hot#0 in flight: the whole backlog")
	f.ack(t, append(hot, b...))
	got, _, _ = f.claim(t, 10, true)
	require.Equal(t, []string{"hot#1"}, got)
	require.Zero(t, count(t, base, `SELECT count(*) FROM pg_indexes WHERE tablename = 'team_outbox' AND indexname LIKE '%head%'`))
}

// TestOrderedClaimWithoutTheHeadIndexHeldRows checks, on a team's table with
// only the contract's indexes, that rows leased (in flight) and dead rows
// (with BlockOnDead) hold their aggregates back in the read of the whole
// backlog, which has no check through the aggregates' history; and that a
// read of the whole backlog that finds no head makes the next
// HeadsPause claims read only their window.
func TestOrderedClaimWithoutTheHeadIndexHeldRows(t *testing.T) {
	t.Parallel()
	f := contractFixture(t, pgstore.WithHeadsOnlyClaims())
	f.write(t, "hot", 400)
	f.write(t, "b", 3)
	f.write(t, "c", 2)
	got, _, _ := f.claim(t, 10, true)
	require.Equal(t, []string{"hot#0"}, got)
	// hot#0 stays in flight from here on: the window holds no head.
	got, b, _ := f.claim(t, 10, true)
	require.Equal(t, []string{"b#0", "c#0"}, got)
	require.NoError(t, f.store.Kill(t.Context(), outbox.KillParams{Dead: []outbox.Dead{{Message: b[0], Reason: "poison"}}}))
	f.ack(t, b[1:])
	got, _, _ = f.claim(t, 10, true)
	require.Equal(t, []string{"c#1"}, got, "the dead b#0 holds b#1 back")
	got, _, _ = f.claim(t, 10, false)
	require.Equal(t, []string{"b#1"}, got, "without BlockOnDead b#1 goes past the dead b#0")

	// Every aggregate in flight: no head, and the next claims read only
	// their window, so a new aggregate behind it waits for them.
	got, _, _ = f.claim(t, 10, false)
	require.Empty(t, got)
	f.write(t, "d", 1)
	for range pgstore.HeadsPause {
		got, _, _ = f.claim(t, 10, false)
		require.Empty(t, got, "paused: the window only")
	}
	got, _, _ = f.claim(t, 10, false)
	require.Equal(t, []string{"d#0"}, got)
}
