package storetest

import (
	"database/sql"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// admin returns a fresh fixture and its store as an outbox.Admin, skipping
// the test when the store does not implement it.
func (s *suite) admin(t *testing.T) (*fx, outbox.Admin) {
	t.Helper()
	f := s.fresh(t)
	a, ok := f.Store.(outbox.Admin)
	if !ok {
		t.Skipf("%T does not implement outbox.Admin", f.Store)
	}
	return f, a
}

// deadFixture writes five messages and leaves rows 0, 2 and 4 dead (row 4
// died two hours ago), row 1 sent and row 3 pending.
func (s *suite) deadFixture(t *testing.T) (*fx, outbox.Admin, []int64) {
	f, a := s.admin(t)
	ids := f.write(
		&outbox.Message{AggregateType: "order", AggregateID: "1", EventType: "ORDER_PAID", Payload: []byte(`{"n":0}`)},
		&outbox.Message{AggregateType: "order", AggregateID: "1", EventType: "ORDER_PAID", Payload: []byte(`{"n":1}`)},
		&outbox.Message{AggregateType: "order", AggregateID: "2", EventType: "ORDER_SHIPPED", Payload: []byte(`{"n":2}`)},
		&outbox.Message{AggregateType: "user", AggregateID: "2", EventType: "USER_CREATED", Payload: []byte(`{"n":3}`)},
		&outbox.Message{AggregateType: "user", AggregateID: "3", EventType: "USER_CREATED", Payload: []byte(`{"n":4}`)},
	)
	ms := f.claimN(5).Messages
	require.Len(t, ms, 5)
	require.NoError(t, f.Store.Kill(t.Context(), outbox.KillParams{Dead: []outbox.Dead{
		{Message: ms[0], Reason: "gave up after 5 attempts: broker timeout"},
		{Message: ms[2], Reason: "unroutable"},
		{Message: ms[4], Reason: "payload too large"},
	}}))
	require.Equal(t, 1, f.ack(false, ms[1]))
	f.setTime("updated_at", time.Now().Add(-2*time.Hour), ids[4])
	return f, a, ids
}

func (s *suite) adminListDead(t *testing.T) {
	f, a, ids := s.deadFixture(t)
	all, err := a.ListDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err)
	require.Len(t, all, 3)
	for i, want := range []struct {
		id     int64
		reason string
		event  string
	}{
		{ids[0], "gave up after 5 attempts: broker timeout", "ORDER_PAID"},
		{ids[2], "unroutable", "ORDER_SHIPPED"},
		{ids[4], "payload too large", "USER_CREATED"},
	} {
		d := all[i]
		require.NotNil(t, d.Message)
		require.Equal(t, want.id, d.Message.RowID, "oldest first")
		require.Equal(t, want.reason, d.Reason)
		require.Equal(t, want.event, d.Message.EventType)
		require.NotEmpty(t, d.Message.MessageID)
		require.NotEmpty(t, d.Message.Payload)
		require.Equal(t, 1, d.Attempts)
		require.Zero(t, d.Message.Attempt, "not a claim")
	}
	d := all[1]
	require.Equal(t, "order", d.Message.AggregateType)
	require.Equal(t, "2", d.Message.AggregateID)
	require.JSONEq(t, `{"n":2}`, string(d.Message.Payload))
	near(t, time.Now(), all[0].DiedAt, time.Minute, "DiedAt")
	near(t, time.Now().Add(-2*time.Hour), all[2].DiedAt, time.Minute, "DiedAt of the old one")
	for i, d := range all {
		require.Zero(t, d.Behind, "dead row %d: the rows after it are sent, or of another aggregate", i)
	}

	checkDeadBehind(t, f, a, ids[4])

	for _, c := range []struct {
		name string
		f    outbox.DeadFilter
		want []int64
	}{
		{"RowIDs", outbox.DeadFilter{RowIDs: []int64{ids[1], ids[2], ids[3]}}, []int64{ids[2]}},
		{"EventType", outbox.DeadFilter{EventType: "USER_CREATED"}, []int64{ids[4]}},
		{"AggregateType", outbox.DeadFilter{AggregateType: "order"}, []int64{ids[0], ids[2]}},
		{"AggregateID", outbox.DeadFilter{AggregateID: "2"}, []int64{ids[2]}},
		{"AggregateTypeAndID", outbox.DeadFilter{AggregateType: "user", AggregateID: "2"}, nil},
		{"OlderThan", outbox.DeadFilter{OlderThan: time.Hour}, []int64{ids[4]}},
		{"ErrorContains", outbox.DeadFilter{ErrorContains: "timeout"}, []int64{ids[0]}},
		{"ErrorContainsIsLiteral", outbox.DeadFilter{ErrorContains: "%"}, nil},
		{"Limit", outbox.DeadFilter{Limit: 2}, []int64{ids[0], ids[2]}},
		{"Combined", outbox.DeadFilter{AggregateType: "order", ErrorContains: "unroutable"}, []int64{ids[2]}},
		{"NoMatch", outbox.DeadFilter{EventType: "nope"}, nil},
	} {
		got, err := a.ListDead(t.Context(), c.f)
		require.NoError(t, err, c.name)
		var gotIDs []int64
		for _, d := range got {
			gotIDs = append(gotIDs, d.Message.RowID)
		}
		require.Equal(t, c.want, gotIDs, c.name)
	}
	require.EqualValues(t, 3, f.count("status = 2"), "listing changed nothing")
}

// checkDeadBehind checks DeadMessage.Behind on deadFixture's dead rows:
// it counts the pending rows of the dead row's own aggregate after it, not
// a sent one, not one of an aggregate of another type with the same id, and
// stops after MaxDeadBehind. userDead is the dead row of user 3.
func checkDeadBehind(t *testing.T, f *fx, a outbox.Admin, userDead int64) {
	t.Helper()
	later := f.write(
		&outbox.Message{AggregateType: "order", AggregateID: "1", EventType: "ORDER_PAID", Payload: []byte(`{"n":5}`)},
		&outbox.Message{AggregateType: "order", AggregateID: "1", EventType: "ORDER_PAID", Payload: []byte(`{"n":6}`)},
		&outbox.Message{AggregateType: "order", AggregateID: "2", EventType: "ORDER_PAID", Payload: []byte(`{"n":7}`)},
		&outbox.Message{AggregateType: "user", AggregateID: "3", EventType: "USER_CREATED", Payload: []byte(`{"n":8}`)},
	)
	f.exec("UPDATE {t} SET status = 1 WHERE id = ?", later[2])
	all, err := a.ListDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err)
	require.Len(t, all, 3)
	for i, want := range []int64{2, 0, 1} {
		require.Equal(t, want, all[i].Behind, "pending rows behind dead row %d", all[i].Message.RowID)
	}
	// The count stops after MaxDeadBehind: one more says "more".
	many := make([]*outbox.Message, outbox.MaxDeadBehind+5)
	for i := range many {
		many[i] = newMsg("user", "3", i)
	}
	f.write(many...)
	all, err = a.ListDead(t.Context(), outbox.DeadFilter{RowIDs: []int64{userDead}})
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.EqualValues(t, outbox.MaxDeadBehind+1, all[0].Behind, "a count past MaxDeadBehind")
}

func (s *suite) adminRetryDead(t *testing.T) {
	f, a, ids := s.deadFixture(t)
	n, err := a.RetryDead(t.Context(), outbox.DeadFilter{AggregateType: "order"})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	for _, id := range []int64{ids[0], ids[2]} {
		r := f.row(id)
		require.Equal(t, 0, r.Status)
		require.Equal(t, 0, r.RetryCount, "a fresh attempt count")
		require.True(t, r.NextRetryAt.IsZero(), "due at once")
	}
	require.Equal(t, "unroutable", f.lastError(ids[2]).String, "last_error is kept until the next attempt")
	c := f.claimN(10)
	require.Equal(t, []int64{ids[0], ids[2]}, rowIDs(c.Messages), "retried rows are claimable; row 3 is still leased")
	for _, m := range c.Messages {
		require.Equal(t, 1, m.Attempt)
	}
	require.Equal(t, 2, f.row(ids[4]).Status, "the other dead row is left alone")
	require.Equal(t, 1, f.row(ids[1]).Status, "sent rows are never retried")

	n, err = a.RetryDead(t.Context(), outbox.DeadFilter{EventType: "x'; DROP TABLE outbox_message; --"})
	require.NoError(t, err, "filter values are parameters")
	require.Zero(t, n)
	n, err = a.RetryDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	n, err = a.RetryDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err)
	require.Zero(t, n)
	require.EqualValues(t, 5, f.count(""))
}

func (s *suite) adminDiscardDead(t *testing.T) {
	f, a, ids := s.deadFixture(t)
	n, err := a.DiscardDead(t.Context(), outbox.DeadFilter{EventType: "ORDER_SHIPPED"})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Zero(t, f.count("id = ?", ids[2]))

	n, err = a.DiscardDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.EqualValues(t, 2, f.count(""), "the sent and the pending row remain")
	require.Zero(t, f.count("status = 2"))
}

func (s *suite) adminArchive(t *testing.T) {
	for _, del := range []bool{false, true} {
		name := map[bool]string{false: "Move", true: "Delete"}[del]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f, a := s.admin(t)
			ids := f.writeN(6)
			ms := f.claimN(6).Messages
			require.Equal(t, 4, f.ack(false, ms[:4]...))
			f.kill("dead", ms[4])
			old := time.Now().Add(-48 * time.Hour)
			f.setTime("updated_at", old, ids[0], ids[1], ids[2], ids[4]) // three old sent rows, one old dead row

			_, err := a.Archive(t.Context(), outbox.ArchiveParams{OlderThan: 24 * time.Hour, Batch: 0})
			require.Error(t, err, "batch 0")

			var moved []int64
			for range 10 {
				n, err := a.Archive(t.Context(), outbox.ArchiveParams{OlderThan: 24 * time.Hour, Batch: 2, Delete: del})
				require.NoError(t, err)
				require.LessOrEqual(t, n, int64(2), "a call moves at most Batch rows")
				if n == 0 {
					break
				}
				moved = append(moved, n)
			}
			require.Equal(t, []int64{2, 1}, moved)
			require.Zero(t, f.count("id IN (?, ?, ?)", ids[0], ids[1], ids[2]), "old sent rows left the table")
			require.EqualValues(t, 3, f.count(""), "the recent sent row, the dead and the pending rows stay")
			require.EqualValues(t, 1, f.count("id = ? AND status = 1", ids[3]))
			require.EqualValues(t, 1, f.count("id = ? AND status = 2", ids[4]))
			if del {
				return
			}
			require.Equal(t, f.Table+"_archive", f.archiveTable())
			got := f.archived("message_id")
			require.Equal(t, ids[:3], rowIDs(got), "archived rows keep their ids")
			for i, m := range got {
				require.Equal(t, ms[i].MessageID, m.MessageID)
			}
			f.setTime("updated_at", old, ids[3])
			n, err := a.Archive(t.Context(), outbox.ArchiveParams{OlderThan: 24 * time.Hour, Batch: 10, Delete: true})
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			require.Len(t, f.archived("message_id"), 3, "deleted rows are not archived")
		})
	}
}

// archived reads the rows of the store's archive table, in id order, with
// their id and the columns cols (message_id, topic, headers).
func (f *fx) archived(cols ...string) []*outbox.Message {
	f.t.Helper()
	q := "SELECT id, " + strings.Join(cols, ", ") + " FROM " + f.archiveTable() + " ORDER BY id"
	rows, err := f.DB.QueryContext(f.t.Context(), q)
	require.NoError(f.t, err, q)
	defer rows.Close()
	var out []*outbox.Message
	for rows.Next() {
		m := &outbox.Message{}
		vals := []any{&m.RowID}
		strs := make([]sql.NullString, len(cols))
		for i := range strs {
			vals = append(vals, &strs[i])
		}
		require.NoError(f.t, rows.Scan(vals...))
		for i, c := range cols {
			switch c {
			case "message_id":
				m.MessageID = strs[i].String
			case "topic":
				m.Topic = strs[i].String
			case "headers":
				if strs[i].Valid {
					require.NoError(f.t, json.Unmarshal([]byte(strs[i].String), &m.Headers))
				}
			}
		}
		out = append(out, m)
	}
	require.NoError(f.t, rows.Err())
	return out
}

// A table with only the contract's columns is archived as it is, and once a
// migration added the optional columns, archived with them: the archive
// table gains them too.
func (s *suite) adminArchiveFollowsNewColumns(t *testing.T) {
	f := s.contract(t)
	a, ok := f.Store.(outbox.Admin)
	if !ok {
		t.Skipf("%T does not implement outbox.Admin", f.Store)
	}
	mig, ok := f.Store.(outbox.Migrator)
	if !ok {
		t.Skipf("%T does not implement outbox.Migrator", f.Store)
	}
	archiveAll := func(want int) {
		t.Helper()
		require.Equal(t, want, f.ack(false, f.claimN(10).Messages...))
		n, err := a.Archive(t.Context(), outbox.ArchiveParams{Batch: 10})
		require.NoError(t, err)
		require.EqualValues(t, want, n)
	}
	f.write(newMsg("a", "1", 0))
	archiveAll(1)
	_, err := a.ListDead(t.Context(), outbox.DeadFilter{ErrorContains: "x"})
	require.ErrorContains(t, err, "no last_error column")

	require.NoError(t, mig.Migrate(t.Context()))
	m := newMsg("a", "2", 1)
	m.Topic, m.Headers = "t2", map[string]string{"k": "after"}
	f.write(m)
	archiveAll(1)
	got := f.archived("topic", "headers")
	require.Len(t, got, 2)
	require.Equal(t, "t2", got[1].Topic)
	require.Equal(t, map[string]string{"k": "after"}, got[1].Headers)
	require.Empty(t, got[0].Topic, "rows archived before have no topic")
}

// archiveTabler is implemented by the stores that name their archive table.
type archiveTabler interface{ ArchiveTable() string }

// archiveTable is the store's archive table. It skips t when the store does
// not name its archive table.
func (f *fx) archiveTable() string {
	f.t.Helper()
	at, ok := f.Store.(archiveTabler)
	if !ok {
		f.t.Skipf("%T does not name its archive table (ArchiveTable)", f.Store)
	}
	return at.ArchiveTable()
}

// archiveExists reports whether the store's archive table exists. It skips t
// when the store does not name its archive table.
func (f *fx) archiveExists() bool {
	f.t.Helper()
	name := f.archiveTable()
	var q string
	switch f.h.Dialect {
	case Postgres:
		q = "SELECT COUNT(*) FROM (SELECT to_regclass($1) AS r) x WHERE r IS NOT NULL" // follows the search_path
	case MySQL:
		q = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
		name = name[strings.LastIndex(name, ".")+1:]
	default:
		q = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?"
		name = name[strings.LastIndex(name, ".")+1:]
	}
	var n int
	require.NoError(f.t, f.DB.QueryRowContext(f.t.Context(), q, name).Scan(&n), "look for %s", name)
	return n > 0
}

// Archive creates the archive table only when a row is old enough to move
// into it, and deleting never creates it: a relay that archives on a
// schedule leaves no empty table behind, and a database user without the
// right to create one sees no error while there is nothing to archive.
func (s *suite) adminArchiveLazy(t *testing.T) {
	t.Run("Move", func(t *testing.T) {
		t.Parallel()
		f, a := s.admin(t)
		p := outbox.ArchiveParams{OlderThan: 24 * time.Hour, Batch: 10}
		n, err := a.Archive(t.Context(), p)
		require.NoError(t, err)
		require.Zero(t, n)
		require.False(t, f.archiveExists(), "an empty outbox table makes no archive table")

		ids := f.writeN(3)
		ms := f.claimN(3).Messages
		require.Equal(t, 2, f.ack(false, ms[:2]...))
		f.kill("dead", ms[2])
		f.setTime("updated_at", time.Now().Add(-48*time.Hour), ids[2]) // old, but dead
		n, err = a.Archive(t.Context(), p)
		require.NoError(t, err)
		require.Zero(t, n)
		require.False(t, f.archiveExists(), "recent sent rows and old dead rows make no archive table")

		f.setTime("updated_at", time.Now().Add(-48*time.Hour), ids[0])
		n, err = a.Archive(t.Context(), p)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		require.True(t, f.archiveExists(), "the first row to move creates it")
		n, err = a.Archive(t.Context(), p)
		require.NoError(t, err)
		require.Zero(t, n, "and it stays, empty handed, once created")
		require.True(t, f.archiveExists())
	})
	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		f, a := s.admin(t)
		ids := f.writeN(2)
		require.Equal(t, 2, f.ack(false, f.claimN(2).Messages...))
		f.setTime("updated_at", time.Now().Add(-48*time.Hour), ids...)
		n, err := a.Archive(t.Context(), outbox.ArchiveParams{OlderThan: 24 * time.Hour, Batch: 10, Delete: true})
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		require.False(t, f.archiveExists(), "deleting never creates the archive table")
	})
}

// Several processes may start archiving a table at once (relays started
// together run their first archive a minute later): the first runs race to
// create the archive table, and every one of them must succeed, with each
// row moved exactly once.
func (s *suite) adminArchiveConcurrent(t *testing.T) {
	f, a := s.admin(t)
	const rows, runs = 40, 6
	ids := f.writeN(rows)
	require.Equal(t, rows, f.ack(false, f.claimN(rows).Messages...))
	f.setTime("updated_at", time.Now().Add(-48*time.Hour), ids...)
	var wg sync.WaitGroup
	moved := make([]int64, runs)
	errs := make([]error, runs)
	start := make(chan struct{})
	for i := range runs {
		wg.Go(func() {
			<-start
			for {
				n, err := a.Archive(t.Context(), outbox.ArchiveParams{OlderThan: 24 * time.Hour, Batch: 3})
				if err != nil || n == 0 {
					errs[i] = err
					return
				}
				moved[i] += n
			}
		})
	}
	close(start)
	wg.Wait()
	var total int64
	for i := range runs {
		require.NoError(t, errs[i], "run %d", i)
		total += moved[i]
	}
	require.EqualValues(t, rows, total, "every row moved once")
	require.Zero(t, f.count(""))
	require.True(t, f.archiveExists())
}
