package sqlitestore

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// orderedStore returns a migrated Store on a database file of the test's own.
func orderedStore(t *testing.T) (*Store, *sql.DB) {
	t.Helper()
	db, err := Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	s, err := New(db)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	return s, db
}

// writeAgg commits n messages of aggregate agg, numbered from 0 in the payload.
func writeAgg(t *testing.T, s *Store, db *sql.DB, agg string, n int) {
	t.Helper()
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{AggregateType: "order", AggregateID: agg, EventType: "E", Payload: fmt.Appendf(nil, "%d", i)}
	}
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter[*sql.Tx](s).Write(t.Context(), tx, msgs...))
	require.NoError(t, tx.Commit())
}

// orderedClaim makes an ordered claim and returns "agg#n" of each message.
func orderedClaim(t *testing.T, s *Store, limit int, blockOnDead bool) ([]string, []*outbox.Message) {
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

// TestOrderedClaimBeyondTheWindow writes a deep backlog of one aggregate
// ahead of twenty others and leases its first row: the rows at the front of
// the backlog are then all blocked, so the runs they would make are empty,
// and the claim takes heads instead; the twenty heads lie beyond the walk's
// window, and the pass over the head index finds them, oldest first.
func TestOrderedClaimBeyondTheWindow(t *testing.T) {
	t.Parallel()
	s, db := orderedStore(t)
	writeAgg(t, s, db, "hot", 1000)
	var want []string
	for i := range 20 {
		agg := fmt.Sprintf("a-%02d", i)
		writeAgg(t, s, db, agg, 2)
		want = append(want, agg+"#0")
	}
	got, hot := orderedClaim(t, s, 1, true)
	require.Equal(t, []string{"hot#0"}, got)
	got, msgs := orderedClaim(t, s, 50, true)
	require.Equal(t, want, got, "the rows blocked behind hot#0 do not starve the other aggregates")
	n, err := s.Ack(t.Context(), outbox.AckParams{Messages: append(msgs, hot...)})
	require.NoError(t, err)
	require.Equal(t, 21, n)
	got, _ = orderedClaim(t, s, 10, true)
	require.Equal(t, []string{"hot#1", "hot#2", "hot#3", "hot#4", "hot#5", "hot#6", "hot#7", "hot#8", "hot#9", "hot#10"}, got,
		"a run, up to the limit")
}

// TestOrderedClaimDeadPolicyBeyondTheWindow checks that runs and the heads
// step keep the dead policy: a dead row ends its aggregate's run only with
// BlockOnDead, even with its aggregate's later rows at the front of the
// backlog.
func TestOrderedClaimDeadPolicyBeyondTheWindow(t *testing.T) {
	t.Parallel()
	s, db := orderedStore(t)
	writeAgg(t, s, db, "b", 3)
	writeAgg(t, s, db, "hot", 400)
	ctx := t.Context()
	got, msgs := orderedClaim(t, s, 1, true)
	require.Equal(t, []string{"b#0"}, got)
	require.NoError(t, s.Kill(ctx, outbox.KillParams{Dead: []outbox.Dead{{Message: msgs[0], Reason: "poison"}}}))

	got, msgs = orderedClaim(t, s, 10, true)
	require.Equal(t, []string{"hot#0", "hot#1", "hot#2", "hot#3", "hot#4", "hot#5", "hot#6", "hot#7"}, got,
		"the dead b#0 holds b#1 back")
	_, err := s.Ack(ctx, outbox.AckParams{Messages: msgs})
	require.NoError(t, err)
	got, _ = orderedClaim(t, s, 10, false)
	require.Equal(t, []string{"b#1", "b#2", "hot#8", "hot#9", "hot#10", "hot#11", "hot#12", "hot#13", "hot#14", "hot#15"}, got,
		"without BlockOnDead b#1 goes past the dead b#0")
}

// TestOrderedClaimWithoutTheHeadIndex runs ordered claims on a team's table
// that has only the contract's indexes (one walk over the whole backlog),
// then checks that Migrate adds the head index.
func TestOrderedClaimWithoutTheHeadIndex(t *testing.T) {
	t.Parallel()
	db, err := Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.Exec(`CREATE TABLE outbox_message (
		id INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT NOT NULL UNIQUE, aggregate_type TEXT NOT NULL,
		aggregate_id TEXT NOT NULL, event_type TEXT NOT NULL, payload TEXT NOT NULL, status INTEGER NOT NULL DEFAULT 0,
		retry_count INTEGER NOT NULL DEFAULT 0, next_retry_at TEXT, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
		updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`)
	require.NoError(t, err)
	s, err := New(db)
	require.NoError(t, err)
	writeAgg(t, s, db, "hot", 300)
	writeAgg(t, s, db, "b", 1)
	got, _ := orderedClaim(t, s, 1, true)
	require.Equal(t, []string{"hot#0"}, got)
	got, _ = orderedClaim(t, s, 10, true)
	require.Equal(t, []string{"b#0"}, got, "the walk over the whole backlog finds the head")

	require.NoError(t, s.Migrate(t.Context()))
	cols, err := s.columns(t.Context(), db)
	require.NoError(t, err)
	require.True(t, cols.headIndex)
	got, _ = orderedClaim(t, s, 10, true)
	require.Empty(t, got, "hot#0 and b#0 are leased, so nothing else may go")
}
