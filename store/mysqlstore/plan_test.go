package mysqlstore

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// TestClaimPlan checks that the claim's locking SELECT walks the (status, id)
// index in id order instead of sorting the due rows: a sort would read, and
// keep locked until the commit, every due row, so that concurrent claims
// would find nothing to take.
func TestClaimPlan(t *testing.T) {
	t.Parallel()
	_, dsn := testsvc.MySQLDatabase(t)
	db, err := Open(dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	s, err := New(db)
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, s.Migrate(ctx))
	// Mostly sent rows over many aggregates, as a table that keeps its sent
	// rows has, so that the optimizer plans for a real table, not an empty one.
	_, err = db.ExecContext(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, status)
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
		rows, err := db.QueryContext(ctx, "EXPLAIN "+q, p.Limit)
		require.NoError(t, err)
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
		rows.Close()
		all := strings.Join(plan, "\n")
		require.Contains(t, plan[0], "table=c", all)
		require.Contains(t, plan[0], "key=idx_status_id", all)
		require.NotContains(t, all, "filesort", all)
		if p.Ordered {
			require.Contains(t, all, "key=idx_aggregate", "the head check uses the aggregate index:\n%s", all)
		}
	}
}
