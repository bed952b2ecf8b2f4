package mysqlstore

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/storetest"
)

// TestClaimPlan checks that the claim's locking SELECT, and the read by
// which ordered claims without the head index pick heads, walk the (status,
// id) index in id order instead of sorting the due rows: a sort would read,
// and keep locked until the commit, every due row, so that concurrent claims
// would find nothing to take.
func TestClaimPlan(t *testing.T) {
	t.Parallel()
	s, db := orderedStore(t)
	ctx := t.Context()
	// Mostly sent rows over many aggregates, as a table that keeps its sent
	// rows has, so that the optimizer plans for a real table, not an empty one.
	_, err := db.ExecContext(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, status)
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 999)
		SELECT CONCAT('m', i), 'order', CONCAT('a', i % 100), 'E', '{}', IF(i < 900, 1, 0) FROM n`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE TABLE outbox_message")
	require.NoError(t, err)
	info, err := s.tableInfo(ctx, db)
	require.NoError(t, err)
	require.Equal(t, "idx_status_id", info.claimIndex)

	for _, p := range []outbox.ClaimParams{{Limit: 10}, {Limit: 10, Ordered: true, BlockOnDead: true}} {
		q, _ := s.claimSQL(info, p)
		if p.Ordered { // the heads' plain read: the locking read is by id
			q = s.headsSQLs(info, p, false)[0].pick
		}
		plan := explainRows(t, db, q, p.Limit)
		all := strings.Join(plan, "\n")
		require.Contains(t, plan[0], "table=c", all)
		require.Contains(t, plan[0], "key=idx_status_id", all)
		require.NotContains(t, all, "filesort", all)
		if p.Ordered {
			require.Contains(t, all, "key=idx_aggregate", "the head check uses the aggregate index:\n%s", all)
		}
	}
}

// explainRows returns the rows of EXPLAIN q, each as "column=value ...".
func explainRows(t *testing.T, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN "+q, args...)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		var line []string
		for i, c := range cols {
			line = append(line, c+"="+vals[i].String)
		}
		plan = append(plan, strings.Join(line, " "))
	}
	require.NoError(t, rows.Err())
	return plan
}

// TestClaimPlanContractOnly checks that on a table with only the contract's
// indexes every locking SELECT of a claim, and every read by which ordered
// claims pick heads, reads a range of the (status, next_retry_at) index
// with no sort: walking the primary key would step over every sent row the
// table keeps, and a sort would read, and lock, every due row. Then that
// claims on it take every row once, due rows only.
func TestClaimPlanContractOnly(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	ctx := t.Context()
	_, err := db.ExecContext(ctx, `CREATE TABLE outbox_message (
  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(64) UNIQUE, aggregate_type VARCHAR(64),
  aggregate_id VARCHAR(64), event_type VARCHAR(64), payload JSON, status TINYINT NOT NULL DEFAULT 0,
  retry_count INT NOT NULL DEFAULT 0, next_retry_at DATETIME NULL,
  created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  INDEX idx_status_next_retry (status, next_retry_at), INDEX idx_aggregate (aggregate_type, aggregate_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`)
	require.NoError(t, err)
	s, err := New(db)
	require.NoError(t, err)
	// Sent rows first, then a backlog of new rows, one due retry and one
	// waiting out its backoff.
	_, err = db.ExecContext(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, status, next_retry_at)
		WITH RECURSIVE r(j) AS (SELECT 1 UNION ALL SELECT j + 1 FROM r WHERE j < 1000),
			n(i) AS (SELECT j + 1000 * k FROM r, (SELECT 0 AS k UNION ALL SELECT 1 UNION ALL SELECT 2) AS x)
		SELECT CONCAT('m', i), 'order', CONCAT('a', i % 300), 'E', '{}', IF(i < 2700, 1, 0),
			CASE WHEN i < 2700 THEN NOW() - INTERVAL 1 DAY WHEN i = 2990 THEN UTC_TIMESTAMP() - INTERVAL 1 MINUTE
			WHEN i = 2991 THEN UTC_TIMESTAMP() + INTERVAL 1 HOUR END FROM n ORDER BY i`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE TABLE outbox_message")
	require.NoError(t, err)
	info, err := s.tableInfo(ctx, db)
	require.NoError(t, err)
	require.Empty(t, info.claimIndex)

	for _, p := range []outbox.ClaimParams{{Limit: 10}, {Limit: 10, Ordered: true}, {Limit: 10, Ordered: true, BlockOnDead: true}} {
		qs, _ := s.claimSQLs(info, p)
		if p.Ordered {
			qs = nil
			for _, h := range s.headsSQLs(info, p, false) {
				qs = append(qs, h.pick)
			}
		}
		require.Len(t, qs, 2)
		for _, q := range qs {
			plan := explainRows(t, db, q, p.Limit)
			all := strings.Join(plan, "\n")
			require.Contains(t, plan[0], "table=c", all)
			require.Contains(t, plan[0], "key=idx_status_next_retry", all)
			require.NotContains(t, all, "filesort", all)
		}
	}

	// Every pending row but the one waiting, once, over claims of 50.
	seen := storetest.ClaimAll(t, s, 50)
	require.Len(t, seen, 3000-2700+1-1)
	require.False(t, seen[2991], "the row waiting out its backoff")
	require.True(t, seen[2990], "the due retry")
}

// TestMissingIndexes checks that a table with only the contract's indexes
// is told the indexes claims would use, with statements that create them,
// and that after those statements, as on a migrated table, none is missing.
func TestMissingIndexes(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	storetest.CheckSQLMissingIndexes(t, db, `CREATE TABLE legacy (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, status TINYINT NOT NULL DEFAULT 0,
		next_retry_at DATETIME NULL, aggregate_type VARCHAR(64), aggregate_id VARCHAR(64),
		INDEX (status, next_retry_at), INDEX (aggregate_type, aggregate_id))`,
		func(table string) (*Store, error) { return New(db, WithTable(table)) })
}

// TestOrderedHeadsLockOnlyWhatTheyTake checks that the heads an ordered
// claim takes on a table without the head index cost row locks in
// proportion to the rows, not to the history of their aggregates. The
// check that a row is a head reads the earlier rows of its aggregate, and
// inside a locking read MariaDB locks what it reads: the control below,
// that single statement, locks thousands of rows for one head, where the
// claim picks with a plain read and locks by id.
func TestOrderedHeadsLockOnlyWhatTheyTake(t *testing.T) {
	t.Parallel()
	s, db := contractStore(t)
	ctx := t.Context()
	// 100 aggregates, each with 100 sent rows and then 20 pending ones;
	// the first pending row of each but the last is leased (in flight), so
	// that only one aggregate has a head and the claim reads every due row
	// looking for more.
	_, err := db.ExecContext(ctx, `SET STATEMENT max_recursive_iterations = 20000 FOR
		INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, status, next_retry_at)
		WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 11999)
		SELECT CONCAT('m', i), 'order', CONCAT('a', i % 100), 'E', '{}', IF(i < 10000, 1, 0),
			IF(i BETWEEN 10000 AND 10098, UTC_TIMESTAMP() + INTERVAL 1 HOUR, NULL) FROM n`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE TABLE outbox_message")
	require.NoError(t, err)
	info, err := s.tableInfo(ctx, db)
	require.NoError(t, err)
	p := outbox.ClaimParams{Limit: 10, Ordered: true, Lease: time.Minute}

	rowLocks := func(tx *sql.Tx) int {
		var n int
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT trx_rows_locked FROM information_schema.innodb_trx"+
			" WHERE trx_mysql_thread_id = CONNECTION_ID()").Scan(&n))
		return n
	}
	inTx := func(f func(tx *sql.Tx) int) int {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback()) }()
		return f(tx)
	}

	var heads int
	locks := inTx(func(tx *sql.Tx) int {
		_, sel := s.claimHead(info, p)
		cl := &claimLocks{s: s, ctx: ctx, tx: tx, sel: sel, p: p, locked: map[int64]*lockedRow{}}
		require.NoError(t, s.lockHeads(ctx, tx, nil, s.headsSQLs(info, p, false), p, p.Limit, 0, cl.lock))
		heads = len(cl.locked)
		return rowLocks(tx)
	})
	require.Equal(t, 1, heads, "the first pending row of the last aggregate")
	require.LessOrEqual(t, locks, pickRows*p.Limit, "row locks for %d heads", heads)

	control := inTx(func(tx *sql.Tx) int {
		pick := s.headsSQLs(info, p, false)[1].pick // the rows never claimed
		rows, err := tx.QueryContext(ctx, strings.Replace(pick, " LIMIT ?", " LIMIT ? FOR UPDATE SKIP LOCKED", 1), p.Limit)
		require.NoError(t, err)
		n := 0
		for rows.Next() {
			n++
		}
		require.NoError(t, rows.Err())
		require.Equal(t, 1, n)
		return rowLocks(tx)
	})
	require.Greater(t, control, 10*locks, "the locking read with the head check")
	t.Logf("row locks for %d heads: %d; with the head check in the locking read: %d", heads, locks, control)
}
