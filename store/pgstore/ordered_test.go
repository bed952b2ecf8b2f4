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
// the walk looks at, and the skip scan of the head index finds them.
// It runs with and without WithAsyncCommit, whose filter every statement carries.
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
			require.EqualValues(t, 3, stmts, "the bounded walk, the skip scan from the cursor, and from the start up to it")
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

// TestOrderedClaimWithoutTheHeadIndex runs ordered claims on a team's table
// that has only the contract's indexes: the store falls back to one walk over
// the whole backlog, slower on a deep one but with the same result.
func TestOrderedClaimWithoutTheHeadIndex(t *testing.T) {
	t.Parallel()
	base, _, _ := testsvc.PostgresSchema(t)
	exec(t, base, fmt.Sprintf(contractDDL, "team_outbox", "jsonb", "timestamptz"))
	s, err := pgstore.New(base, pgstore.WithTable("team_outbox"))
	require.NoError(t, err)
	f := &orderedFixture{pool: base, store: s, counter: &statementCounter{}}
	f.write(t, "hot", 400)
	f.write(t, "b", 2)
	got, msgs, _ := f.claim(t, 10, true)
	require.Equal(t, []string{"hot#0", "b#0"}, got)
	f.ack(t, msgs)
	got, _, _ = f.claim(t, 10, true)
	require.Equal(t, []string{"hot#1", "b#1"}, got)
	require.Zero(t, count(t, base, `SELECT count(*) FROM pg_indexes WHERE tablename = 'team_outbox' AND indexname LIKE '%head%'`))
}
