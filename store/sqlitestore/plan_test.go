package sqlitestore

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// TestClaimPlan checks that a claim walks the pending-rows index in id order
// and stops at its limit, instead of sorting every pending row: the
// difference between microseconds and seconds on a large backlog.
func TestClaimPlan(t *testing.T) {
	t.Parallel()
	db, err := Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	s, err := New(db)
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, s.Migrate(ctx))
	cols, err := s.columns(ctx, db)
	require.NoError(t, err)
	require.True(t, cols.pendingIndex)

	for _, p := range []outbox.ClaimParams{{Limit: 10}, {Limit: 10, Ordered: true, BlockOnDead: true}} {
		q, _ := s.claimSQL(cols, p)
		rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, "2024-01-01 00:00:00.000000", "2024-01-01 00:00:00.000000", 10)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Err())
		rows.Close()
		all := strings.Join(plan, "; ")
		require.Contains(t, all, "SCAN c USING", "ordered=%v: %s", p.Ordered, all)
		require.Contains(t, all, "INDEX outbox_message_pending", "ordered=%v: %s", p.Ordered, all)
		require.NotContains(t, all, "TEMP B-TREE", "ordered=%v: %s", p.Ordered, all)
		if p.Ordered {
			require.Contains(t, all, "outbox_message_head", "the head check uses the head index (migration 0003): %s", all)
		}
	}
}
