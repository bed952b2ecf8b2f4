package sqlitestore

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/internal/sqltest"
)

// orderedStore returns a migrated Store on a database file of the test's own.
func orderedStore(t *testing.T) (*Store, *sql.DB) { return sqltest.Migrated(t, New, testDB(t)) }

// testDB opens a database file of the test's own.
func testDB(t *testing.T) *sql.DB {
	t.Helper()
	return sqltest.OpenDB(t, Open, testsvc.SQLitePath(t))
}

// queryPlan returns EXPLAIN QUERY PLAN q, its details joined by "; ".
func queryPlan(t *testing.T, db *sql.DB, q string, args ...any) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, args...)
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	return strings.Join(plan, "; ")
}

// TestOrderedClaimPlans checks that both steps of an ordered claim read the
// head index alone (covering, no table reads for the check), under both dead
// policies, and that the walk reads the pending index up to the window's end.
func TestOrderedClaimPlans(t *testing.T) {
	t.Parallel()
	s, db := orderedStore(t)
	cols, err := s.columns(t.Context(), db)
	require.NoError(t, err)
	require.True(t, cols.headIndex)
	const at = "2024-01-01 00:00:00.000000"
	for _, block := range []bool{true, false} {
		p := outbox.ClaimParams{Limit: 10, Ordered: true, BlockOnDead: block}
		_, sel := s.claimSQL(cols, p)
		ord := s.orderedClaimSQL(cols, p, sel)
		require.NotNil(t, ord)
		walk := queryPlan(t, db, ord.walk, at, at, 10)
		require.Contains(t, walk, "c USING INDEX outbox_message_pending (id<?)", walk)
		require.Contains(t, walk, "USING COVERING INDEX outbox_message_head (aggregate_type=? AND aggregate_id=? AND id<?)", walk)
		heads := queryPlan(t, db, ord.heads, at, at, 10)
		require.Contains(t, heads, "SCAN h USING COVERING INDEX outbox_message_head", heads)
		require.NotContains(t, heads, "TEMP B-TREE FOR GROUP BY", heads)
	}
}

// TestOrderedClaimBeyondTheWindow: see sqltest.OrderedBeyondTheWindow.
func TestOrderedClaimBeyondTheWindow(t *testing.T) {
	t.Parallel()
	sqltest.OrderedBeyondTheWindow(t, orderedStore)
}

// TestOrderedClaimWithoutTheHeadIndex runs ordered claims on a team's table
// that has only the contract's indexes (the heads claim reads the first
// pending row of every aggregate from the status index), then checks that
// Migrate adds the head index.
func TestOrderedClaimWithoutTheHeadIndex(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	_, err := db.Exec(`CREATE TABLE outbox_message (
		id INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT NOT NULL UNIQUE, aggregate_type TEXT NOT NULL,
		aggregate_id TEXT NOT NULL, event_type TEXT NOT NULL, payload TEXT NOT NULL, status INTEGER NOT NULL DEFAULT 0,
		retry_count INTEGER NOT NULL DEFAULT 0, next_retry_at TEXT, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
		updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`)
	require.NoError(t, err)
	s, err := New(db)
	require.NoError(t, err)
	sqltest.WriteAgg(t, s, db, "hot", 300)
	sqltest.WriteAgg(t, s, db, "b", 1)
	got, _ := sqltest.ClaimOrdered(t, s, 1, true)
	require.Equal(t, []string{"hot#0"}, got)
	got, _ = sqltest.ClaimOrdered(t, s, 10, true)
	require.Equal(t, []string{"b#0"}, got, "the heads claim finds the head behind hot's blocked rows")

	require.NoError(t, s.Migrate(t.Context()))
	cols, err := s.columns(t.Context(), db)
	require.NoError(t, err)
	require.True(t, cols.headIndex)
	got, _ = sqltest.ClaimOrdered(t, s, 10, true)
	require.Empty(t, got, "hot#0 and b#0 are leased, so nothing else may go")
}
