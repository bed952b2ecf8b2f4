package sqlitestore_test

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// adminFixture writes six messages and leaves rows 0-3 dead (row 0 died two
// hours ago), row 4 sent and row 5 pending.
func adminFixture(t *testing.T) (*sqlitestore.Store, *sql.DB, []int64) {
	t.Helper()
	s, db := newStore(t)
	ctx := t.Context()
	in := []*outbox.Message{
		{AggregateType: "order", AggregateID: "1", EventType: "E1", Payload: []byte(`{"n":0}`)},
		{AggregateType: "order", AggregateID: "2", EventType: "E1", Payload: []byte(`{"n":1}`)},
		{AggregateType: "user", AggregateID: "3", EventType: "E2", Payload: []byte(`{"n":2}`)},
		{AggregateType: "order", AggregateID: "4", EventType: "E2", Payload: []byte(`{"n":3}`)},
		{AggregateType: "order", AggregateID: "5", EventType: "E1", Payload: []byte(`{"n":4}`)},
		{AggregateType: "order", AggregateID: "6", EventType: "E1", Payload: []byte(`{"n":5}`)},
	}
	require.NoError(t, writeFunc(db, s)(ctx, in...))
	c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 5, Lease: time.Hour})
	require.NoError(t, err)
	ms := c.Messages
	require.NoError(t, s.Kill(ctx, outbox.KillParams{Dead: []outbox.Dead{
		{Message: ms[0], Reason: "boom-a"}, {Message: ms[1], Reason: "boom-b"},
		{Message: ms[2], Reason: "other"}, {Message: ms[3], Reason: "boom-c"},
	}}))
	n, err := s.Ack(ctx, outbox.AckParams{Messages: ms[4:5]})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ids := make([]int64, 0, 6)
	for _, m := range ms {
		ids = append(ids, m.RowID)
	}
	ids = append(ids, ms[4].RowID+1)
	_, err = db.Exec("UPDATE outbox_message SET updated_at = ? WHERE id = ?", sqliteTime(time.Now().Add(-2*time.Hour)), ids[0])
	require.NoError(t, err)
	return s, db, ids
}

func TestListDead(t *testing.T) {
	t.Parallel()
	s, _, ids := adminFixture(t)
	pick := func(is ...int) []int64 {
		out := []int64{}
		for _, i := range is {
			out = append(out, ids[i])
		}
		return out
	}
	for _, c := range []struct {
		name string
		f    outbox.DeadFilter
		want []int64
	}{
		{"All", outbox.DeadFilter{}, pick(0, 1, 2, 3)},
		{"RowIDs", outbox.DeadFilter{RowIDs: []int64{ids[3], ids[4], ids[1]}}, pick(1, 3)},
		{"EventType", outbox.DeadFilter{EventType: "E2"}, pick(2, 3)},
		{"AggregateType", outbox.DeadFilter{AggregateType: "user"}, pick(2)},
		{"AggregateID", outbox.DeadFilter{AggregateID: "1"}, pick(0)},
		{"OlderThan", outbox.DeadFilter{OlderThan: time.Hour}, pick(0)},
		{"ErrorContains", outbox.DeadFilter{ErrorContains: "boom"}, pick(0, 1, 3)},
		{"Limit", outbox.DeadFilter{Limit: 2}, pick(0, 1)},
		{"Combined", outbox.DeadFilter{EventType: "E1", ErrorContains: "boom-b"}, pick(1)},
		{"NoMatch", outbox.DeadFilter{EventType: "nope"}, pick()},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := s.ListDead(t.Context(), c.f)
			require.NoError(t, err)
			gotIDs := []int64{}
			for _, d := range got {
				gotIDs = append(gotIDs, d.Message.RowID)
			}
			require.Equal(t, c.want, gotIDs)
		})
	}
	t.Run("Fields", func(t *testing.T) {
		got, err := s.ListDead(t.Context(), outbox.DeadFilter{RowIDs: ids[1:2]})
		require.NoError(t, err)
		require.Len(t, got, 1)
		d := got[0]
		require.Equal(t, 1, d.Attempts)
		require.Equal(t, "boom-b", d.Reason)
		require.WithinDuration(t, time.Now(), d.DiedAt, time.Minute)
		require.Equal(t, "order", d.Message.AggregateType)
		require.Equal(t, "2", d.Message.AggregateID)
		require.Equal(t, "E1", d.Message.EventType)
		require.JSONEq(t, `{"n":1}`, string(d.Message.Payload))
		require.Zero(t, d.Message.Attempt, "not a claim")
	})
}

func TestRetryAndDiscardDead(t *testing.T) {
	t.Parallel()
	s, db, ids := adminFixture(t)
	ctx := t.Context()

	n, err := s.RetryDead(ctx, outbox.DeadFilter{ErrorContains: "boom", EventType: "E1"})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	var status, retries int
	var next sql.NullString
	var lastErr string
	require.NoError(t, db.QueryRow("SELECT status, retry_count, next_retry_at, last_error FROM outbox_message WHERE id = ?", ids[1]).
		Scan(&status, &retries, &next, &lastErr))
	require.Equal(t, 0, status)
	require.Equal(t, 0, retries)
	require.False(t, next.Valid)
	require.Equal(t, "boom-b", lastErr, "kept until the next attempt")

	c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Hour})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0], ids[1], ids[5]}, claimedIDs(c))
	require.Equal(t, 1, c.Messages[0].Attempt, "a fresh attempt count")

	n, err = s.DiscardDead(ctx, outbox.DeadFilter{AggregateType: "user"})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	n, err = s.DiscardDead(ctx, outbox.DeadFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the last dead row")
	require.Equal(t, 4, count(t, db, "outbox_message"))
	require.Equal(t, 0, count(t, db, "outbox_message WHERE status = 2"))

	_, err = s.RetryDead(ctx, outbox.DeadFilter{EventType: "x'; DROP TABLE outbox_message; --"})
	require.NoError(t, err, "filter values are parameters")
	require.Equal(t, 4, count(t, db, "outbox_message"))
}

func TestArchive(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := t.Context()
	const n = 7
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = msg("order", fmt.Sprint(i))
		msgs[i].Headers = map[string]string{"i": fmt.Sprint(i)}
	}
	require.NoError(t, writeFunc(db, s)(ctx, msgs...))
	c, err := s.Claim(ctx, outbox.ClaimParams{Limit: n, Lease: time.Hour})
	require.NoError(t, err)
	acked, err := s.Ack(ctx, outbox.AckParams{Messages: c.Messages[:6]})
	require.NoError(t, err)
	require.Equal(t, 6, acked)
	old := sqliteTime(time.Now().Add(-8 * 24 * time.Hour))
	_, err = db.Exec("UPDATE outbox_message SET updated_at = ? WHERE id <= ?", old, c.Messages[4].RowID)
	require.NoError(t, err)

	_, err = s.Archive(ctx, outbox.ArchiveParams{OlderThan: time.Hour})
	require.Error(t, err, "batch 0")

	// Rows 0-4 are old and sent, row 5 sent recently, row 6 pending.
	moved, err := s.Archive(ctx, outbox.ArchiveParams{OlderThan: 7 * 24 * time.Hour, Batch: 2})
	require.NoError(t, err)
	require.EqualValues(t, 2, moved)
	total := moved
	for {
		moved, err := s.Archive(ctx, outbox.ArchiveParams{OlderThan: 7 * 24 * time.Hour, Batch: 2})
		require.NoError(t, err)
		if moved == 0 {
			break
		}
		total += moved
	}
	require.EqualValues(t, 5, total)
	require.Equal(t, 2, count(t, db, "outbox_message"))
	require.Equal(t, "outbox_message_archive", s.ArchiveTable())
	require.Equal(t, 5, count(t, db, "outbox_message_archive"))
	var id int64
	var msgID, headers string
	require.NoError(t, db.QueryRow("SELECT id, message_id, headers FROM outbox_message_archive ORDER BY id LIMIT 1").Scan(&id, &msgID, &headers))
	require.Equal(t, c.Messages[0].RowID, id, "rows keep their ids")
	require.Equal(t, c.Messages[0].MessageID, msgID)
	require.JSONEq(t, `{"i":"0"}`, headers)

	// Deleting instead of moving; the recent row stays until it is old enough.
	moved, err = s.Archive(ctx, outbox.ArchiveParams{OlderThan: 0, Batch: 10, Delete: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, moved)
	require.Equal(t, 5, count(t, db, "outbox_message_archive"), "deleted rows are not archived")
	require.Equal(t, 1, count(t, db, "outbox_message WHERE status = 0"), "pending rows are never archived")
}

// TestArchiveFollowsNewColumns: a hand-made table archived before Migrate
// added its optional columns keeps archiving after.
func TestArchiveFollowsNewColumns(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := t.Context()
	_, err := db.ExecContext(ctx, fmt.Sprintf(contractDDL, "outbox_message"))
	require.NoError(t, err)
	s, err := sqlitestore.New(db)
	require.NoError(t, err)
	archiveAll := func() {
		t.Helper()
		c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Hour})
		require.NoError(t, err)
		_, err = s.Ack(ctx, outbox.AckParams{Messages: c.Messages})
		require.NoError(t, err)
		moved, err := s.Archive(ctx, outbox.ArchiveParams{Batch: 10})
		require.NoError(t, err)
		require.EqualValues(t, len(c.Messages), moved)
	}
	require.NoError(t, writeFunc(db, s)(ctx, msg("a", "1")))
	archiveAll()
	_, err = s.ListDead(ctx, outbox.DeadFilter{ErrorContains: "x"})
	require.ErrorContains(t, err, "no last_error column")

	require.NoError(t, s.Migrate(ctx))
	m := msg("a", "2")
	m.Topic = "t2"
	require.NoError(t, writeFunc(db, s)(ctx, m))
	archiveAll()
	var topic sql.NullString
	require.NoError(t, db.QueryRow("SELECT topic FROM outbox_message_archive ORDER BY id DESC LIMIT 1").Scan(&topic))
	require.Equal(t, "t2", topic.String)
	require.Equal(t, 2, count(t, db, "outbox_message_archive"))
}

func claimedIDs(c *outbox.Claim) []int64 {
	ids := make([]int64, len(c.Messages))
	for i, m := range c.Messages {
		ids[i] = m.RowID
	}
	return ids
}
