package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/runcheck"
)

// WriteAgg commits n messages of aggregate agg (message ids agg-0, agg-1,
// ...), numbered from 0 in the payload, in one transaction.
func WriteAgg(t *testing.T, s outbox.TxInserter[*sql.Tx], db *sql.DB, agg string, n int) {
	t.Helper()
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{MessageID: fmt.Sprintf("%s-%d", agg, i), AggregateType: "order", AggregateID: agg,
			EventType: "E", Payload: fmt.Appendf(nil, "%d", i)}
	}
	require.NoError(t, Write(db, s)(t.Context(), msgs...))
}

// writeRows commits one message per "agg#n" (message id agg-n, payload n),
// in one transaction, in order.
func writeRows(t *testing.T, s outbox.TxInserter[*sql.Tx], db *sql.DB, rows ...string) {
	t.Helper()
	var msgs []*outbox.Message
	for _, r := range rows {
		agg, n, _ := strings.Cut(r, "#")
		msgs = append(msgs, &outbox.Message{MessageID: agg + "-" + n, AggregateType: "order", AggregateID: agg,
			EventType: "E", Payload: []byte(n)})
	}
	require.NoError(t, Write(db, s)(t.Context(), msgs...))
}

// ClaimOrdered makes an ordered claim with an hour's lease and returns
// "agg#payload" of each message, and the messages.
func ClaimOrdered(t *testing.T, s outbox.Store, limit int, blockOnDead bool) ([]string, []*outbox.Message) {
	t.Helper()
	c, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: limit, Lease: time.Hour, Ordered: true, BlockOnDead: blockOnDead})
	require.NoError(t, err)
	require.Empty(t, c.Malformed)
	var got []string
	for _, m := range c.Messages {
		got = append(got, fmt.Sprintf("%s#%s", m.AggregateID, m.Payload))
	}
	return got, c.Messages
}

// OrderedBeyondTheWindow runs, in parallel subtests on migrated tables
// that migrated opens, the ordered claims over rows beyond the window of
// the claim's walk: heads and the dead policy.
func OrderedBeyondTheWindow[S Store](t *testing.T, migrated func(*testing.T) (S, *sql.DB)) {
	t.Helper()
	for _, c := range []struct {
		name string
		run  func(*testing.T, Store, *sql.DB)
	}{{"Heads", headsBeyondTheWindow}, {"DeadPolicy", deadPolicyBeyondTheWindow}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, db := migrated(t)
			c.run(t, s, db)
		})
	}
}

// headsBeyondTheWindow writes a deep backlog of one aggregate ahead of
// twenty others and leases its first row: the rows at the front of the
// backlog are then all blocked, so the runs they would make are empty, and
// the claim takes heads instead; the twenty heads lie beyond the walk's
// window, and the claim finds them, oldest first. Once those are
// acknowledged, a claim takes a run of the deep aggregate, a quarter of its
// limit, and the others' next rows.
func headsBeyondTheWindow(t *testing.T, s Store, db *sql.DB) {
	t.Helper()
	WriteAgg(t, s, db, "hot", 1000)
	var want []string
	for i := range 20 {
		agg := fmt.Sprintf("a-%02d", i)
		WriteAgg(t, s, db, agg, 2)
		want = append(want, agg+"#0")
	}
	got, hot := ClaimOrdered(t, s, 1, true)
	require.Equal(t, []string{"hot#0"}, got)
	got, msgs := ClaimOrdered(t, s, 50, true)
	require.Equal(t, want, got, "the rows blocked behind hot#0 do not starve the other aggregates")
	n, err := s.Ack(t.Context(), outbox.AckParams{Messages: append(msgs, hot...)})
	require.NoError(t, err)
	require.Equal(t, 21, n)
	want = hotRun(1)
	for i := range 20 {
		want = append(want, fmt.Sprintf("a-%02d#1", i))
	}
	got, _ = ClaimOrdered(t, s, 40, true)
	require.Equal(t, want, got, "a run of a quarter of the limit, then the others' heads")
}

// deadPolicyBeyondTheWindow checks that runs and the heads step keep the
// dead policy: a dead row ends its aggregate's run only with BlockOnDead,
// even with its aggregate's later rows at the front of the backlog.
func deadPolicyBeyondTheWindow(t *testing.T, s Store, db *sql.DB) {
	t.Helper()
	WriteAgg(t, s, db, "b", 3)
	WriteAgg(t, s, db, "hot", 400)
	ctx := t.Context()
	got, msgs := ClaimOrdered(t, s, 1, true)
	require.Equal(t, []string{"b#0"}, got)
	require.NoError(t, s.Kill(ctx, outbox.KillParams{Dead: []outbox.Dead{{Message: msgs[0], Reason: "poison"}}}))

	got, msgs = ClaimOrdered(t, s, 40, true)
	require.Equal(t, hotRun(0), got, "the dead b#0 holds b#1 back")
	_, err := s.Ack(ctx, outbox.AckParams{Messages: msgs})
	require.NoError(t, err)
	got, _ = ClaimOrdered(t, s, 40, false)
	require.Equal(t, append([]string{"b#1", "b#2"}, hotRun(10)...), got, "without BlockOnDead b#1 goes past the dead b#0")
}

// hotRun returns rows from to from+9 of the aggregate "hot": the run a
// claim of 40 keeps of it, a quarter of its limit.
func hotRun(from int) []string {
	var rows []string
	for i := from; i < from+10; i++ {
		rows = append(rows, fmt.Sprintf("hot#%d", i))
	}
	return rows
}

// RunsCase is a case of [RunsClaim]: with block set, a#0 is claimed (and so
// leased) first, and block does something to it (a holds it) before the
// claim that is checked; it may return a function that undoes it after
// that claim.
type RunsCase struct {
	Name        string
	BlockOnDead bool
	Limit       int
	Block       func(t *testing.T, s outbox.Store, db *sql.DB, a []*outbox.Message) func()
	Want        []string
}

// runsCases are what ends a run on every store: nothing, when nothing
// blocks; a row leased by another claim, waiting out a backoff, or dead
// under BlockOnDead; and a quarter of the limit, the longest run a claim
// keeps.
var runsCases = []RunsCase{
	{Name: "NothingBlocks", Limit: 12, Want: []string{"a#0", "b#0", "a#1", "b#1", "a#2", "c#0"}},
	{Name: "QuarterOfTheLimit", Limit: 8, Want: []string{"a#0", "b#0", "a#1", "b#1", "c#0"}},
	{Name: "Acknowledged", Limit: 10, Want: []string{"b#0", "a#1", "b#1", "a#2", "c#0"},
		Block: func(t *testing.T, s outbox.Store, _ *sql.DB, a []*outbox.Message) func() {
			_, err := s.Ack(t.Context(), outbox.AckParams{Messages: a[:1]})
			require.NoError(t, err)
			return nil
		}},
	{Name: "Leased", Limit: 10, Want: []string{"b#0", "b#1", "c#0"}, // a#0 stays leased
		Block: func(*testing.T, outbox.Store, *sql.DB, []*outbox.Message) func() { return nil }},
	{Name: "Backoff", Limit: 10, Want: []string{"b#0", "b#1", "c#0"},
		Block: func(t *testing.T, s outbox.Store, _ *sql.DB, a []*outbox.Message) func() {
			Reschedule(t, s, a[0], time.Now().Add(time.Hour))
			return nil
		}},
	{Name: "DueAgain", Limit: 12, Want: []string{"a#0", "b#0", "a#1", "b#1", "a#2", "c#0"},
		Block: func(t *testing.T, s outbox.Store, _ *sql.DB, a []*outbox.Message) func() {
			Reschedule(t, s, a[0], time.Now().Add(-time.Minute))
			return nil
		}},
	{Name: "DeadBlocks", BlockOnDead: true, Limit: 10, Want: []string{"b#0", "b#1", "c#0"},
		Block: func(t *testing.T, s outbox.Store, _ *sql.DB, a []*outbox.Message) func() {
			require.NoError(t, s.Kill(t.Context(), outbox.KillParams{Dead: []outbox.Dead{{Message: a[0], Reason: "poison"}}}))
			return nil
		}},
	{Name: "DeadSkipped", Limit: 10, Want: []string{"b#0", "a#1", "b#1", "a#2", "c#0"},
		Block: func(t *testing.T, s outbox.Store, _ *sql.DB, a []*outbox.Message) func() {
			require.NoError(t, s.Kill(t.Context(), outbox.KillParams{Dead: []outbox.Dead{{Message: a[0], Reason: "poison"}}}))
			return nil
		}},
}

// Reschedule makes m due at at.
func Reschedule(t *testing.T, s outbox.Store, m *outbox.Message, at time.Time) {
	t.Helper()
	require.NoError(t, s.Reschedule(t.Context(), outbox.RescheduleParams{Retries: []outbox.Retry{{Message: m, At: at}}}))
}

// RunsClaim runs, in parallel, the cases of what ends a run that every store
// shares, then more, each on a migrated table and on one with only the
// contract's indexes (runcheck.BothTables), on the rows a#0, b#0, a#1, b#1,
// a#2, c#0.
func RunsClaim[S Store](t *testing.T, migrated, contract func(*testing.T) (S, *sql.DB), more ...RunsCase) {
	t.Helper()
	for _, tc := range append(runsCases[:len(runsCases):len(runsCases)], more...) {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			runcheck.BothTables(t, migrated, contract, func(t *testing.T, s S, db *sql.DB) {
				writeRows(t, s, db, "a#0", "b#0", "a#1", "b#1", "a#2", "c#0")
				if tc.Block != nil {
					got, a := ClaimOrdered(t, s, 1, tc.BlockOnDead)
					require.Equal(t, []string{"a#0"}, got)
					if undo := tc.Block(t, s, db, a); undo != nil {
						defer undo()
					}
				}
				got, _ := ClaimOrdered(t, s, tc.Limit, tc.BlockOnDead)
				require.Equal(t, tc.Want, got)
			})
		})
	}
}

// RunsLeaveRoomForOthers writes a deep backlog of one aggregate ahead of
// another's, on both tables: a claim keeps at most a quarter of its limit
// of the first one and takes the other's head, so the aggregate behind is
// not held up until the first one drains, whether or not the claim names
// a Chain.
func RunsLeaveRoomForOthers[S Store](t *testing.T, migrated, contract func(*testing.T) (S, *sql.DB)) {
	t.Helper()
	runcheck.BothTables(t, migrated, contract, func(t *testing.T, s S, db *sql.DB) {
		WriteAgg(t, s, db, "hot", 20)
		WriteAgg(t, s, db, "b", 2)
		got, _ := ClaimOrdered(t, s, 8, true)
		require.Equal(t, []string{"hot#0", "hot#1", "b#0"}, got)
	})
}

// RunsConcurrent runs ordered claimers side by side while writers commit
// and messages die and are retried (runcheck.Violations), on both tables:
// no message may be claimed before its predecessor was confirmed. A write
// whose error retry accepts is tried again (nil: none is).
func RunsConcurrent[S Store](t *testing.T, migrated, contract func(*testing.T) (S, *sql.DB), retry func(error) bool) {
	t.Helper()
	runcheck.BothTables(t, migrated, contract, func(t *testing.T, s S, db *sql.DB) {
		write := runcheck.SQLWrite(db, outbox.NewWriter[*sql.Tx](s))
		again := func(ctx context.Context, msgs []*outbox.Message) error {
			for {
				err := write(ctx, msgs)
				if err == nil || retry == nil || !retry(err) || ctx.Err() != nil {
					return err
				}
			}
		}
		require.Zero(t, runcheck.Violations(t, s, again), "messages claimed before their predecessor was confirmed")
	})
}
