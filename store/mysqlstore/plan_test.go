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
		args := []any{p.Limit}
		if p.Ordered { // the heads' read of the backlog: the locking read is by id
			q, args = s.headReadsFor(info, p, false).fresh, []any{0, p.Limit}
		}
		plan := explainRows(t, db, q, args...)
		all := strings.Join(plan, "\n")
		require.Contains(t, plan[0], "table=c", all)
		require.Contains(t, plan[0], "key=idx_status_id", all)
		require.NotContains(t, all, "filesort", all)
		require.NotContains(t, all, "idx_aggregate", "no read of an aggregate's history:\n%s", all)
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
		args := [][]any{{p.Limit}, {p.Limit}}
		if p.Ordered {
			h := s.headReadsFor(info, p, false)
			pick, _ := s.slotPickSQL(info, p) // the slot's rows never claimed
			qs, args = []string{h.fresh, h.others, pick}, [][]any{{0, p.Limit}, nil, {3, 1, p.Limit}}
		}
		for i, q := range qs {
			plan := explainRows(t, db, q, args[i]...)
			all := strings.Join(plan, "\n")
			for _, row := range plan {
				if strings.Contains(row, "table=c") { // not the union's result
					require.Contains(t, row, "key=idx_status_next_retry", all)
				}
			}
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

// headsTable returns a Store on a table with only the contract's indexes
// that keeps a history: 100 aggregates, each with 100 sent rows and then
// 20 pending ones. The first pending row of each but the last is leased
// (in flight), so that only one aggregate has a head and a claim that
// wants more reads every due row looking for them. The control is the
// statement heads were taken by before (heads.go): the rows never claimed,
// each checked for an earlier pending row of its aggregate.
func headsTable(t *testing.T) (s *Store, db *sql.DB, info tableInfo, control string) {
	t.Helper()
	s, db = contractStore(t)
	ctx := t.Context()
	_, err := db.ExecContext(ctx, `SET STATEMENT max_recursive_iterations = 20000 FOR
		INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, status, next_retry_at)
		WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 11999)
		SELECT CONCAT('m', i), 'order', CONCAT('a', i % 100), 'E', '{}', IF(i < 10000, 1, 0),
			IF(i BETWEEN 10000 AND 10098, UTC_TIMESTAMP() + INTERVAL 1 HOUR, NULL) FROM n`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE TABLE outbox_message")
	require.NoError(t, err)
	info, err = s.tableInfo(ctx, db)
	require.NoError(t, err)
	control = "SELECT c.id FROM outbox_message AS c FORCE INDEX (" + quoteIdent(info.statusIndex) + ")" +
		" WHERE c.status = 0 AND c.next_retry_at IS NULL AND NOT EXISTS (SELECT 1 FROM outbox_message AS h" +
		" WHERE h.aggregate_type = c.aggregate_type AND h.aggregate_id = c.aggregate_id AND h.id < c.id AND h.status = 0)" +
		" ORDER BY c.id LIMIT ?"
	return s, db, info, control
}

// inReadCommitted runs f in a READ COMMITTED transaction, as claims run,
// rolls it back and returns what f returned.
func inReadCommitted(t *testing.T, db *sql.DB, f func(tx *sql.Tx) int) int {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback()) }()
	return f(tx)
}

// TestOrderedHeadsLockOnlyWhatTheyTake checks that the heads an ordered
// claim takes on a table without the head index cost row locks in
// proportion to the rows, not to the history of their aggregates. Inside a
// locking read MariaDB locks what it reads: the control, the check for an
// earlier pending row in a locking read, locks thousands of rows for one
// head, where the claim picks with plain reads and locks by id.
func TestOrderedHeadsLockOnlyWhatTheyTake(t *testing.T) {
	t.Parallel()
	s, db, info, control := headsTable(t)
	ctx := t.Context()
	p := outbox.ClaimParams{Limit: 10, Ordered: true, Lease: time.Minute}
	rowLocks := func(tx *sql.Tx) int {
		var n int
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT trx_rows_locked FROM information_schema.innodb_trx"+
			" WHERE trx_mysql_thread_id = CONNECTION_ID()").Scan(&n))
		return n
	}

	var heads int
	locks := inReadCommitted(t, db, func(tx *sql.Tx) int {
		_, sel := s.claimHead(info, p)
		cl := &claimLocks{s: s, ctx: ctx, tx: tx, sel: sel, p: p, locked: map[int64]*lockedRow{}}
		require.NoError(t, s.lockHeads(ctx, tx, nil, s.headReadsFor(info, p, false), p, p.Limit, 0, cl.lock))
		heads = len(cl.locked)
		return rowLocks(tx)
	})
	require.Equal(t, 1, heads, "the first pending row of the last aggregate")
	require.LessOrEqual(t, locks, pickRows*p.Limit, "row locks for %d heads", heads)

	controlLocks := inReadCommitted(t, db, func(tx *sql.Tx) int {
		require.Equal(t, 1, countRows(t, tx, control+" FOR UPDATE SKIP LOCKED", p.Limit))
		return rowLocks(tx)
	})
	require.Greater(t, controlLocks, 10*locks, "the locking read with the head check")
	t.Logf("row locks for %d heads: %d; with the head check in the locking read: %d", heads, locks, controlLocks)
}

// TestHeadsReadTheBacklogNotTheHistory checks that finding heads on a table
// without the head index reads about the rows of the backlog, not each
// row's aggregate history: the rows it reads, counted by the server's
// handler counters, against the control's, which checks every row against
// its aggregate's earlier rows.
func TestHeadsReadTheBacklogNotTheHistory(t *testing.T) {
	t.Parallel()
	s, db, info, control := headsTable(t)
	ctx := t.Context()
	p := outbox.ClaimParams{Limit: 10, Ordered: true, Lease: time.Minute}
	// reads is the index reads the server made for f in tx.
	reads := func(tx *sql.Tx, f func()) int {
		count := func() int {
			n := 0
			err := queryRows(ctx, tx, "SHOW SESSION STATUS WHERE Variable_name IN"+
				" ('Handler_read_first', 'Handler_read_key', 'Handler_read_next', 'Handler_read_prev')", nil,
				func(rows *sql.Rows) error {
					var name string
					var v int
					err := rows.Scan(&name, &v)
					n += v
					return err
				})
			require.NoError(t, err)
			return n
		}
		before := count()
		f()
		return count() - before
	}

	var ids []any
	ours := inReadCommitted(t, db, func(tx *sql.Tx) int {
		return reads(tx, func() {
			var err error
			ids, err = s.pickHeads(ctx, tx, s.headReadsFor(info, p, false), p, p.Limit)
			require.NoError(t, err)
		})
	})
	require.Equal(t, []any{int64(10100)}, ids, "the first pending row of the last aggregate")
	const backlog = 2000 // pending rows
	require.Less(t, ours, 2*backlog, "index reads to find the heads of a backlog of %d rows", backlog)

	theirs := inReadCommitted(t, db, func(tx *sql.Tx) int {
		return reads(tx, func() { require.Equal(t, 1, countRows(t, tx, control, p.Limit)) })
	})
	require.Greater(t, theirs, 10*ours, "the check of every row against its aggregate's history")
	t.Logf("index reads for the heads of %d pending rows behind 10,000 sent: %d; checking each row's history: %d", backlog, ours, theirs)
}

// countRows runs q in tx and returns how many rows it returned.
func countRows(t *testing.T, tx *sql.Tx, q string, args ...any) int {
	t.Helper()
	n := 0
	require.NoError(t, queryRows(t.Context(), tx, q, args, func(*sql.Rows) error { n++; return nil }))
	return n
}

// TestHeadsBeyondTheFirstPage checks how far the heads step reads on a table
// without the head index (pickHeads). The first 300 rows of the backlog,
// more than the first page of a claim of 10, belong to aggregates held
// back: leased (in flight), or dead with BlockOnDead. A head behind them is
// found by reading on; a read of the whole backlog that finds none makes
// the next headsPause steps read only the first page, and a dead front,
// which gives heads further on, pauses nothing.
func TestHeadsBeyondTheFirstPage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		held string // what holds the first row of each of the 3 aggregates at the front back
		p    outbox.ClaimParams
	}{
		{"InFlight", "status = 0, next_retry_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR", outbox.ClaimParams{Limit: 10, Ordered: true}},
		{"DeadBlocks", "status = 2", outbox.ClaimParams{Limit: 10, Ordered: true, BlockOnDead: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, db := contractStore(t)
			ctx := t.Context()
			require.Greater(t, 300, firstPage(tc.p.Limit))
			_, err := db.ExecContext(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload)
				WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)
				SELECT CONCAT('m', i), 'order', CONCAT('a', i % 3), 'E', '{}' FROM n`)
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "UPDATE outbox_message SET "+tc.held+" WHERE id <= 3")
			require.NoError(t, err)
			info, err := s.tableInfo(ctx, db)
			require.NoError(t, err)
			h := s.headReadsFor(info, tc.p, false)
			pick := func() []any {
				var ids []any
				inReadCommitted(t, db, func(tx *sql.Tx) int {
					ids, err = s.pickHeads(ctx, tx, h, tc.p, tc.p.Limit)
					require.NoError(t, err)
					return 0
				})
				return ids
			}

			require.Empty(t, pick(), "every aggregate held back")
			require.EqualValues(t, headsPause, s.headsPaused[0].Left(), "a read of the whole backlog found no head")
			// A new aggregate behind the held-back rows: the paused steps
			// read only the first page, then a deep read finds it.
			_, err = db.ExecContext(ctx, "INSERT INTO outbox_message (id, message_id, aggregate_type, aggregate_id, event_type, payload)"+
				" VALUES (1000, 'new', 'order', 'b', 'E', '{}')")
			require.NoError(t, err)
			for range headsPause {
				require.Empty(t, pick(), "paused: the first page only")
			}
			for range 3 {
				require.Equal(t, []any{int64(1000)}, pick(), "found by reading on, and pausing nothing")
			}
			require.Zero(t, s.headsPaused[0].Left())
		})
	}
}
