package sqlitestore

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/storetest"
)

// TestClaimPlan checks that a claim walks the pending-rows index in id order
// and stops at its limit, instead of sorting every pending row: the
// difference between microseconds and seconds on a large backlog.
func TestClaimPlan(t *testing.T) {
	t.Parallel()
	s, db := orderedStore(t)
	ctx := t.Context()
	cols, err := s.columns(ctx, db)
	require.NoError(t, err)
	require.True(t, cols.pendingIndex)

	q, _ := s.claimSQL(cols, outbox.ClaimParams{Limit: 10})
	all := queryPlan(t, db, q, "2024-01-01 00:00:00.000000", "2024-01-01 00:00:00.000000", 10)
	require.Contains(t, all, "SCAN c USING", all)
	require.Contains(t, all, "INDEX outbox_message_pending", all)
	require.NotContains(t, all, "TEMP B-TREE", all)
}

// TestClaimPlanContractOnly checks that on a table with only the contract's
// indexes a claim, and the heads claim of an ordered one, read ranges of
// the (status, next_retry_at) index instead of walking the rowids past
// every sent row kept or the aggregates' histories, then that claims on it
// take every due row once, in id order.
func TestClaimPlanContractOnly(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	ctx := t.Context()
	_, err := db.ExecContext(ctx, `CREATE TABLE legacy (id INTEGER PRIMARY KEY AUTOINCREMENT, message_id VARCHAR(64) UNIQUE,
		aggregate_type VARCHAR(64), aggregate_id VARCHAR(64), event_type VARCHAR(64), payload JSON,
		status SMALLINT NOT NULL DEFAULT 0, retry_count INT NOT NULL DEFAULT 0, next_retry_at DATETIME NULL,
		created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP, updated_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP);
	CREATE INDEX legacy_status_next_retry ON legacy (status, next_retry_at);
	CREATE INDEX legacy_aggregate ON legacy (aggregate_type, aggregate_id);
	WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5300)
	INSERT INTO legacy (message_id, aggregate_type, aggregate_id, event_type, payload, status, next_retry_at)
	SELECT 'm' || i, 'order', 'a' || (i % 300), 'E', '{}', IIF(i <= 5000, 1, 0),
		CASE WHEN i <= 5000 THEN '2024-01-01 00:00:00' WHEN i = 5290 THEN '2024-01-01 00:00:00'
		WHEN i = 5291 THEN '9999-01-01 00:00:00' END FROM n;
	ANALYZE`)
	require.NoError(t, err)
	s, err := New(db, WithTable("legacy"))
	require.NoError(t, err)
	cols, err := s.columns(ctx, db)
	require.NoError(t, err)
	require.False(t, cols.pendingIndex)

	now := formatTime(time.Now())
	q, _ := s.claimSQL(cols, outbox.ClaimParams{Limit: 10})
	all := queryPlan(t, db, q, now, now, 10)
	require.NotContains(t, strings.Split(all, "; "), "SCAN c", "a walk of every row: %s", all)
	require.Contains(t, all, "INDEX legacy_status_next_retry (status=? AND next_retry_at=?)", all)

	for _, block := range []bool{false, true} {
		p := outbox.ClaimParams{Limit: 10, Ordered: true, BlockOnDead: block}
		_, sel := s.claimSQL(cols, p)
		all := queryPlan(t, db, s.headsSQL(p, sel), now, now, 10)
		require.NotContains(t, strings.Split(all, "; "), "SCAN h", "block=%v: a walk of every row kept: %s", block, all)
		require.NotContains(t, all, "legacy_aggregate", "block=%v: the aggregates' histories: %s", block, all)
		require.Contains(t, all, "INDEX legacy_status_next_retry (status=? AND next_retry_at=?)", "block=%v: %s", block, all)
	}

	seen := storetest.ClaimAll(t, s, 50)
	require.Len(t, seen, 300-1, "every due row")
	require.True(t, seen[5290], "the due retry")
	require.False(t, seen[5291], "the row waiting out its backoff")
}

// TestMissingIndexes checks that a table with only the contract's indexes
// is told the indexes claims would use, with statements that create them,
// and that after those statements, as on a migrated table, none is missing.
func TestMissingIndexes(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	storetest.CheckSQLMissingIndexes(t, db, `CREATE TABLE legacy (id INTEGER PRIMARY KEY AUTOINCREMENT, status INTEGER NOT NULL DEFAULT 0,
		next_retry_at TEXT, aggregate_type TEXT, aggregate_id TEXT)`,
		func(table string) (*Store, error) { return New(db, WithTable(table)) })
}
