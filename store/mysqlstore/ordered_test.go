package mysqlstore

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/internal/sqltest"
)

// orderedStore returns a migrated Store on a database of the test's own.
func orderedStore(t *testing.T) (*Store, *sql.DB) { return sqltest.Migrated(t, New, testDB(t)) }

// testDB opens a database of the test's own.
func testDB(t *testing.T) *sql.DB {
	t.Helper()
	_, dsn := testsvc.MySQLDatabase(t)
	return sqltest.OpenDB(t, Open, dsn)
}

// writeSentThenPending writes rows 1 to 5,000 of 50 aggregates in turn,
// those up to sent marked sent, and updates the table's statistics.
func writeSentThenPending(t *testing.T, db *sql.DB, sent int) {
	t.Helper()
	ctx := t.Context()
	_, err := db.ExecContext(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, status)
		WITH d(n) AS (SELECT 0 UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
			UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9),
		n(i) AS (SELECT 1 + a.n + 10 * b.n + 100 * c.n + 1000 * e.n FROM d AS a, d AS b, d AS c, d AS e)
		SELECT CONCAT('m', i), 'order', CONCAT('a', i % 50), 'E', '{}', IF(i <= ?, 1, 0) FROM n WHERE i <= 5000 ORDER BY i`, sent)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE TABLE outbox_message")
	require.NoError(t, err)
}

// readCost runs q on a connection of its own and returns how many rows it
// returned and how many index entries and rows it read, by every access
// method (the session's handler counters).
func readCost(t *testing.T, db *sql.DB, q string, args ...any) (rows int, read float64) {
	t.Helper()
	ctx := t.Context()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "FLUSH STATUS")
	require.NoError(t, err)
	rs, err := conn.QueryContext(ctx, q, args...)
	require.NoError(t, err)
	for rs.Next() {
		rows++
	}
	require.NoError(t, rs.Err())
	require.NoError(t, rs.Close())
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT SUM(variable_value) FROM information_schema.session_status
		WHERE variable_name IN ('HANDLER_READ_FIRST', 'HANDLER_READ_KEY', 'HANDLER_READ_NEXT', 'HANDLER_READ_PREV', 'HANDLER_READ_RND', 'HANDLER_READ_RND_NEXT')`).Scan(&read))
	t.Logf("read %v", read)
	return rows, read
}

// explain returns EXPLAIN q, a line a row (see explainRows).
func explain(t *testing.T, db *sql.DB, q string, args ...any) string {
	t.Helper()
	return strings.Join(explainRows(t, db, q, args...), "\n")
}

// TestOrderedClaimPlans checks the plans that keep an ordered claim cheap on
// a deep backlog: the walk reads the (status, id) index up to the window's
// last id and probes the head index by (status, aggregate); the fallback
// reads the head index with a loose index scan, one dive per aggregate.
func TestOrderedClaimPlans(t *testing.T) {
	t.Parallel()
	s, db := orderedStore(t)
	ctx := t.Context()
	writeSentThenPending(t, db, 1999)
	info, err := s.tableInfo(ctx, db)
	require.NoError(t, err)
	require.Equal(t, "idx_status_aggregate", info.headIndex)

	p := outbox.ClaimParams{Limit: 100, Ordered: true, BlockOnDead: true}
	q, sel := s.claimSQL(info, p)
	ord := s.orderedClaimSQL(info, p, sel)
	require.NotNil(t, ord)
	var bound int64
	require.NoError(t, db.QueryRowContext(ctx, ord.bound, 0).Scan(&bound))
	require.EqualValues(t, 2000+orderedWindow(p.Limit)-1, bound, "the window's last row")

	walk := explain(t, db, ord.walk, 0, bound, p.Limit)
	require.Regexp(t, `(?m)^.*table=c type=range .*key=idx_status_id`, walk, "the walk reads the window only:\n%s", walk)
	require.Equal(t, 2, strings.Count(walk, "key=idx_status_aggregate"), "two probes of the head index:\n%s", walk)
	require.NotContains(t, walk, "filesort")

	heads := explain(t, db, ord.heads, p.Limit)
	require.Contains(t, heads, "Using index for group-by", "a loose index scan:\n%s", heads)

	require.Nil(t, s.orderedClaimSQL(info, outbox.ClaimParams{Limit: 10}, sel), "unordered claims walk as before")
	require.NotEmpty(t, q)
}

// TestOrderedClaimBeyondTheWindow: see sqltest.OrderedBeyondTheWindow.
func TestOrderedClaimBeyondTheWindow(t *testing.T) {
	t.Parallel()
	sqltest.OrderedBeyondTheWindow(t, orderedStore)
}

// TestOrderedProbesReadOneEntry runs the walk and the read of runs over a
// deep backlog of three aggregates, with ANALYZE: each "earlier row" probe
// must read one entry of the head index, not every pending row of its
// aggregate (which MySQL and MariaDB do for NOT EXISTS (... AND h.id < c.id)
// on a head), and the read of runs only the aggregates' rows up to the last
// candidate, not every pending row.
func TestOrderedProbesReadOneEntry(t *testing.T) {
	t.Parallel()
	s, db := orderedStore(t)
	ctx := t.Context()
	writeInterleaved(t, s, db)
	_, err := db.ExecContext(ctx, "ANALYZE TABLE outbox_message")
	require.NoError(t, err)

	p := outbox.ClaimParams{Limit: 10, Lease: time.Hour, Ordered: true, BlockOnDead: true}
	info, err := s.tableInfo(ctx, db)
	require.NoError(t, err)
	_, sel := s.claimSQL(info, p)
	ord := s.orderedClaimSQL(info, p, sel)
	require.NotNil(t, ord)
	var bound int64
	require.NoError(t, db.QueryRowContext(ctx, ord.bound, 0).Scan(&bound))
	heads := []any{int64(1), int64(2), int64(3)} // a#0, b#0, c#0

	for _, tc := range []struct {
		name  string
		query string
		args  []any
	}{
		{"Walk", ord.walk, []any{0, bound, p.Limit}},
		{"Runs", s.runsSQL(info, p, len(heads)), []any{heads[2], "order", "a", "order", "b", "order", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			require.NoError(t, err)
			defer func() { require.NoError(t, tx.Rollback()) }() // ANALYZE runs the locking read: let go of it
			var plan string
			require.NoError(t, tx.QueryRowContext(ctx, "ANALYZE FORMAT=JSON "+tc.query, tc.args...).Scan(&plan))
			var tree any
			require.NoError(t, json.Unmarshal([]byte(plan), &tree))
			read := 0.0 // index entries of the probed table h read, over all executions
			var visit func(n any)
			visit = func(n any) {
				switch n := n.(type) {
				case map[string]any:
					if n["table_name"] == "h" {
						loops, _ := n["r_loops"].(float64)
						rows, _ := n["r_rows"].(float64)
						read += loops * rows
					}
					for _, v := range n {
						visit(v)
					}
				case []any:
					for _, v := range n {
						visit(v)
					}
				}
			}
			visit(tree)
			// Three aggregates, two statuses: a handful of dives of one entry each.
			require.LessOrEqual(t, read, 12.0, "index entries the probes read:\n%s", plan)
		})
	}
}

// TestOrderedClaimFewAggregatesSkipsTheWalk gives three aggregates a deep,
// interleaved backlog, the shape where claims find the rows at the front
// blocked while other relays hold runs, and so also take heads: once a loose
// scan has counted the aggregates, and they are no more than the limit, that
// step runs the loose scan alone; when more aggregates turn up than the
// limit, it goes back to the walk.
func TestOrderedClaimFewAggregatesSkipsTheWalk(t *testing.T) {
	t.Parallel()
	s, db := orderedStore(t)
	ctx := t.Context()
	writeInterleaved(t, s, db)
	p := outbox.ClaimParams{Limit: 10, Lease: time.Hour, Ordered: true, BlockOnDead: true}

	got, a0 := sqltest.ClaimOrdered(t, s, 1, true) // another relay holds a#0
	require.Equal(t, []string{"a#0"}, got)
	require.False(t, s.fewAggregates(p), "nothing counted yet")

	steps := []struct {
		name    string
		before  func(t *testing.T)
		want    []string
		wantFew bool // the next claim runs the loose scan alone
	}{
		{name: "ShortClaimWalksThenCountsTheAggregates", want: []string{"b#0", "c#0", "b#1", "c#1"}, // runs of a quarter of the limit
			wantFew: true},
		{name: "LooseScanAloneTakesNothingHeld", want: nil, wantFew: true},
		{name: "AndTheNextRunOnceAcknowledged", before: func(t *testing.T) {
			_, err := s.Ack(ctx, outbox.AckParams{Messages: a0})
			require.NoError(t, err)
		}, want: []string{"a#1", "a#2"}, wantFew: true},
		{name: "MoreAggregatesThanTheLimit", before: func(t *testing.T) {
			for i := range 12 {
				sqltest.WriteAgg(t, s, db, fmt.Sprintf("x-%02d", i), 1)
			}
		}, want: []string{"x-00#0", "x-01#0", "x-02#0", "x-03#0", "x-04#0", "x-05#0", "x-06#0", "x-07#0", "x-08#0", "x-09#0"},
			wantFew: false},
		{name: "SendTheNextClaimBackToTheWalk", want: []string{"x-10#0", "x-11#0"}, wantFew: false},
	}
	for _, st := range steps { // in order: each step starts where the last one left the table
		if st.before != nil {
			st.before(t)
		}
		got, _ := sqltest.ClaimOrdered(t, s, p.Limit, true)
		require.Equal(t, st.want, got, st.name)
		require.Equal(t, st.wantFew, s.fewAggregates(p), st.name)
	}
}

// TestMigrateAddsTheHeadIndex checks that Migrate gives a pasted table the
// head index, and that ordered claims on a table without it still work.
func TestMigrateAddsTheHeadIndex(t *testing.T) {
	t.Parallel()
	s, db := contractStore(t)
	sqltest.WriteAgg(t, s, db, "hot", 300)
	sqltest.WriteAgg(t, s, db, "b", 1)
	got, _ := sqltest.ClaimOrdered(t, s, 1, true)
	require.Equal(t, []string{"hot#0"}, got)
	got, _ = sqltest.ClaimOrdered(t, s, 10, true)
	require.Equal(t, []string{"b#0"}, got, "without the head index: the walk over the whole backlog finds the head")

	require.NoError(t, s.Migrate(t.Context()))
	info, err := s.tableInfo(t.Context(), db)
	require.NoError(t, err)
	require.Equal(t, "idx_status_aggregate", info.headIndex)
}

// TestOrderedClaimRechecksHeads makes an earlier row of an aggregate appear
// between an ordered claim's locking reads and its read of runs, as a writer that
// commits while the claim's scan runs does in InnoDB (the scan skips the
// writer's row k, still locked, then takes row k+1, committed by then, and
// its probe reads a snapshot without row k). The claim must not hand out
// row k+1. Both shapes of the ordered claim run: with and without the head
// index.
func TestOrderedClaimRechecksHeads(t *testing.T) {
	t.Parallel()
	for _, headIdx := range []bool{true, false} {
		t.Run(fmt.Sprintf("headIndex=%v", headIdx), func(t *testing.T) {
			t.Parallel()
			s, db := orderedStore(t)
			if !headIdx {
				info, err := s.tableInfo(t.Context(), db)
				require.NoError(t, err)
				_, err = db.ExecContext(t.Context(), "DROP INDEX "+quoteIdent(info.headIndex)+" ON "+s.table.quoted())
				require.NoError(t, err)
				s.mu.Lock()
				s.info = nil // look at the table's indexes again
				s.mu.Unlock()
				info, err = s.tableInfo(t.Context(), db)
				require.NoError(t, err)
				require.Empty(t, info.headIndex)
			}
			// Leave room below the first id for the row that shows up late.
			_, err := db.ExecContext(t.Context(), "ALTER TABLE "+s.table.quoted()+" AUTO_INCREMENT = 100")
			require.NoError(t, err)
			sqltest.WriteAgg(t, s, db, "a", 1) // a#0, id 100
			sqltest.WriteAgg(t, s, db, "b", 1) // b#0, id 101
			s.afterLock = func() {
				s.afterLock = nil
				_, err := db.ExecContext(t.Context(), "INSERT INTO "+s.table.quoted()+
					" (id, message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (50, 'a-early', 'order', 'a', 'E', '-1')")
				require.NoError(t, err)
			}
			got, _ := sqltest.ClaimOrdered(t, s, 10, true)
			require.Equal(t, []string{"b#0"}, got, "a#0 is no longer a head: a row before it committed")
			var status, retries int
			require.NoError(t, db.QueryRowContext(t.Context(), "SELECT status, COALESCE(retry_count, 0) FROM "+
				s.table.quoted()+" WHERE id = 100").Scan(&status, &retries))
			require.Equal(t, [2]int{0, 0}, [2]int{status, retries}, "the dropped row stays pending, its attempt not counted")
			got, _ = sqltest.ClaimOrdered(t, s, 10, true)
			require.Equal(t, []string{"a#-1", "a#0"}, got, "the early row starts the run now")
		})
	}
}

// writeInterleaved writes 300 messages each for aggregates a, b and c,
// interleaved (a-0, b-0, c-0, a-1, ...), in one transaction.
func writeInterleaved(t *testing.T, s *Store, db *sql.DB) {
	t.Helper()
	var msgs []*outbox.Message
	for i := range 300 {
		for _, agg := range []string{"a", "b", "c"} {
			msgs = append(msgs, &outbox.Message{MessageID: fmt.Sprintf("%s-%d", agg, i), AggregateType: "order",
				AggregateID: agg, EventType: "E", Payload: fmt.Appendf(nil, "%d", i)})
		}
	}
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter[*sql.Tx](s).Write(t.Context(), tx, msgs...))
	require.NoError(t, tx.Commit())
}
