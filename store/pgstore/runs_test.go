package pgstore_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/runcheck"
	"github.com/outboxkit/outbox/store/pgstore"
)

// onBothTables runs f, in parallel subtests, on a fixture whose store
// claims runs (not the heads-only store of the heads tests): on the
// migrated table, and on one with only the contract's indexes.
func onBothTables(t *testing.T, f func(t *testing.T, f *orderedFixture)) {
	t.Helper()
	for _, table := range []string{"migrated", "contract"} {
		t.Run(table, func(t *testing.T) {
			t.Parallel()
			var fx *orderedFixture
			if table == "contract" {
				fx = contractFixture(t)
			} else {
				fx = newOrderedFixture(t)
				fx.store = newStore(t, fx.pool)
			}
			f(t, fx)
		})
	}
}

// TestRunsClaimConcurrent runs ordered claimers beside writers, kills and
// an operator's retries (runcheck.Violations) on the migrated table and on
// one with only the contract's indexes: no message may be claimed before
// its predecessor was confirmed.
func TestRunsClaimConcurrent(t *testing.T) {
	t.Parallel()
	onBothTables(t, func(t *testing.T, f *orderedFixture) {
		w := outbox.NewWriter(f.store)
		write := func(ctx context.Context, msgs []*outbox.Message) error {
			return pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
		}
		require.Zero(t, runcheck.Violations(t, f.store, write), "messages claimed before their predecessor was confirmed")
	})
}

// TestRunsClaimChains checks ClaimParams.Chain on the migrated table and on
// one with only the contract's indexes: rows of an aggregate that follow
// rows the relay holds (its batches in flight) come back only when the
// claim names those rows in Chain, the named rows are not claimed again,
// and a row of the chain that is not the relay's (an earlier row it does
// not name) still ends the run.
func TestRunsClaimChains(t *testing.T) {
	t.Parallel()
	onBothTables(t, func(t *testing.T, f *orderedFixture) {
		f.write(t, "a", 6)
		claim := func(limit int, chain ...*outbox.Message) ([]string, []*outbox.Message) {
			t.Helper()
			return runcheck.ClaimChained(t, f.store, limit, chain...)
		}
		got, first := claim(8)
		require.Equal(t, []string{"a#0", "a#1"}, got, "a run of two: a quarter of the limit")
		got, _ = claim(8)
		require.Empty(t, got, "a#0 and a#1 are leased: without them in Chain nothing follows")
		got, second := claim(8, first[1])
		require.Empty(t, got, "a#0 is leased and not in Chain: it ends the run")
		got, second = claim(8, first...)
		require.Equal(t, []string{"a#2", "a#3"}, got, "chained after a#0 and a#1")
		got, _ = claim(8, append(first, second...)...)
		require.Equal(t, []string{"a#4", "a#5"}, got, "chained after both batches")
	})
}

// TestRunsClaimLeavesRoomForOthers writes a deep backlog of one aggregate
// ahead of another's: a run is at most a quarter of the limit, and the heads
// claim fills the rest, so the aggregate behind is not held up until the
// first one drains.
func TestRunsClaimLeavesRoomForOthers(t *testing.T) {
	t.Parallel()
	f := newOrderedFixture(t)
	f.store = newStore(t, f.pool)
	f.write(t, "hot", 20)
	f.write(t, "b", 2)
	c, err := f.store.Claim(t.Context(), outbox.ClaimParams{Limit: 8, Lease: time.Hour, Ordered: true, BlockOnDead: true})
	require.NoError(t, err)
	var got []string
	for _, m := range c.Messages {
		got = append(got, fmt.Sprintf("%s#%s", m.AggregateID, m.Payload))
	}
	require.Equal(t, []string{"hot#0", "hot#1", "b#0"}, got)
}

// TestRunsClaimByAggregateOnContractTable checks how a runs claim picks
// its candidates on a table with only the contract's indexes, where each
// aggregate it takes costs an index entry for every row the table keeps of
// it: by aggregate, in the order of their oldest row in the window, each
// with a run of up to a quarter of the limit, so that a claim reads a few
// histories instead of one per row. When the window is full, a short claim
// goes on with the heads claim, so that an aggregate beyond the window is
// not held up behind deep ones at its front.
func TestRunsClaimByAggregateOnContractTable(t *testing.T) {
	t.Parallel()
	t.Run("Runs", func(t *testing.T) {
		t.Parallel()
		f := contractFixture(t)
		f.writeInterleaved(t, []string{"a", "b", "c", "d", "e", "f"}, 4)
		got, _, _ := f.claim(t, 8, true)
		// In id order: message 0 of each of the four aggregates, then message 1.
		require.Equal(t, []string{"a#0", "b#0", "c#0", "d#0", "a#1", "b#1", "c#1", "d#1"}, got,
			"runs of two of the four oldest aggregates, not one row of each of eight")
		got, _, _ = f.claim(t, 8, true)
		require.Equal(t, []string{"e#0", "f#0", "e#1", "f#1"}, got, "the others; a to d are leased")
	})
	t.Run("BeyondTheWindow", func(t *testing.T) {
		t.Parallel()
		f := contractFixture(t)
		f.writeInterleaved(t, []string{"x", "y"}, 200) // 400 rows: more than the window of 256
		f.write(t, "late", 1)
		got, _, _ := f.claim(t, 8, true)
		require.Equal(t, []string{"x#0", "y#0", "x#1", "y#1", "late#0"}, got,
			"two runs of two, then the heads claim finds the aggregate beyond the window")
	})
	t.Run("ShallowAggregates", func(t *testing.T) {
		t.Parallel()
		f := contractFixture(t)
		aggs := make([]string, 20)
		for i := range aggs {
			aggs[i] = fmt.Sprintf("s%02d", i)
		}
		f.writeInterleaved(t, aggs, 2)
		got, _, _ := f.claim(t, 40, true)
		require.Len(t, got, 40, "the first read of four aggregates offered 8 rows: the claim reads more, "+
			"by what each offered, and takes every aggregate's run of two: %v", got)
		for i, agg := range aggs {
			require.Equal(t, []string{agg + "#0", agg + "#1"}, []string{got[i], got[len(aggs)+i]})
		}
	})
	t.Run("LockedRowEndsItsRun", func(t *testing.T) {
		t.Parallel()
		f := contractFixture(t)
		f.writeInterleaved(t, []string{"a", "b"}, 4)
		tx, err := f.pool.Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		var id int64
		require.NoError(t, tx.QueryRow(t.Context(),
			`SELECT id FROM team_outbox WHERE id = (SELECT id FROM team_outbox WHERE aggregate_id = 'a' ORDER BY id OFFSET 1 LIMIT 1)
			FOR UPDATE`).Scan(&id)) // a#1 only: rows an OFFSET skips are locked too
		got, _, _ := f.claim(t, 8, true)
		require.Equal(t, []string{"a#0", "b#0", "b#1"}, got,
			"a#1 is locked by another transaction, so the lock skips it and a's run ends before it")
		require.NoError(t, tx.Rollback(t.Context()))
	})
}

// TestSlotRunsClaimDoesNotScanTheTable checks the plan of a relay slot's
// runs claim as the first executions on a connection get it, planned for
// their parameters: it must read the table through its indexes (the
// pending index in id order, on the migrated table). With the slot's
// condition written as a plain equality the planner took it to keep 1 row
// in 200, expected a few hundred rows of the slot in the whole table, and
// chose to read all of it and sort.
func TestSlotRunsClaimDoesNotScanTheTable(t *testing.T) {
	t.Parallel()
	onBothTables(t, slotRunsPlan)
}

func slotRunsPlan(t *testing.T, f *orderedFixture) {
	table := f.store.Table()
	exec(t, f.pool, `INSERT INTO `+table+` (message_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT 'm-' || i, 'order', 'a-' || (i % 100), 'E', '{}' FROM generate_series(1, 50000) AS i`)
	exec(t, f.pool, "ANALYZE "+table)
	p := outbox.ClaimParams{Limit: 1000, Lease: time.Minute, Ordered: true, Slots: 3, Slot: 1}
	sql, args, err := pgstore.RunsSQL(t.Context(), f.store, p)
	require.NoError(t, err)
	require.Contains(t, sql, "mine AS (", "a slot's statement")

	tx, err := f.pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(t.Context())) }()
	exec := func(sql string) {
		_, err := tx.Exec(t.Context(), sql)
		require.NoError(t, err)
	}
	exec("SET LOCAL plan_cache_mode = force_custom_plan")
	var plan []map[string]any
	all := append(append([]any{p.Limit, p.Lease.Microseconds(), int64(0), int64(math.MaxInt64)}, args...), 1<<20)
	require.NoError(t, tx.QueryRow(t.Context(), "EXPLAIN (FORMAT JSON) "+sql, all...).Scan(&plan))
	var scans []string
	var visit func(n map[string]any)
	visit = func(n map[string]any) {
		if n["Relation Name"] == table {
			scans = append(scans, fmt.Sprintf("%v %v", n["Node Type"], n["Index Name"]))
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			visit(c.(map[string]any))
		}
	}
	visit(plan[0]["Plan"].(map[string]any))
	require.NotEmpty(t, scans)
	for _, s := range scans {
		require.NotContains(t, s, "Seq Scan", "scans of the table: %v", scans)
	}
}
