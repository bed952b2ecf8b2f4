package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

func (s *suite) stats(t *testing.T) {
	f := s.fresh(t)
	ids := f.writeN(8)
	ms := f.claimN(8).Messages
	require.Len(t, ms, 8)

	now := time.Now()
	require.Equal(t, 4, f.ack(false, ms[0], ms[1], ms[2], ms[3]))
	f.setTime("updated_at", now.Add(-30*time.Minute), ids[2]) // sent within the hour
	f.setTime("updated_at", now.Add(-2*time.Hour), ids[3])    // sent before that
	f.kill("dead", ms[4], ms[5])
	f.setTime("created_at", now.Add(-time.Hour), ids[6]) // oldest pending (leased)
	f.setTime("created_at", now.Add(-3*time.Hour), ids[0])

	st, err := f.Store.Stats(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Pending, "pending, leased rows included")
	require.EqualValues(t, 2, st.Dead)
	require.EqualValues(t, 2, st.SentLastMinute)
	require.EqualValues(t, 3, st.SentLastHour)
	require.InDelta(t, time.Hour.Seconds(), st.OldestPending.Seconds(), 60, "oldest pending age %v", st.OldestPending)
}

func (s *suite) statsEmpty(t *testing.T) {
	f := s.fresh(t)
	st, err := f.Store.Stats(t.Context())
	require.NoError(t, err)
	require.NotNil(t, st)
	require.Zero(t, *st)
}

// otherStatus plants rows whose status is none of the three the relay knows
// (0 pending, 1 sent, 2 dead), as another program sharing the table could
// write them: the relay must leave them alone (never claimed, not reported
// malformed, not holding back their aggregate's later rows in an ordered
// claim), and Stats must count them apart, in OtherStatus, so that an
// operator sees them.
func (s *suite) otherStatus(t *testing.T) {
	f := s.fresh(t)
	statuses := []any{3, -1, 100}
	switch f.h.Dialect {
	case Postgres: // a team's own table may have a nullable status
		f.exec("ALTER TABLE {t} ALTER COLUMN status DROP NOT NULL")
		statuses = append(statuses, nil)
	case MySQL:
		f.exec("ALTER TABLE {t} MODIFY status TINYINT NULL DEFAULT 0")
		statuses = append(statuses, nil)
	case SQLite: // cannot drop NOT NULL, but keeps any value its column is given
		statuses = append(statuses, "sent", 1.5)
	}

	dead := f.write(newMsg("order", "agg-dead", 0))[0]
	f.kill("dead", f.claimN(1).Messages...)
	require.Equal(t, 2, f.row(dead).Status)

	// One aggregate: the other-status rows first, then a pending row.
	msgs := make([]*outbox.Message, len(statuses)+1)
	for i := range msgs {
		msgs[i] = newMsg("order", "agg-other", i)
	}
	ids := f.write(msgs...)
	for i, st := range statuses {
		require.EqualValues(t, 1, f.exec("UPDATE {t} SET status = ? WHERE id = ?", st, ids[i]), "status %v", st)
	}
	pending := ids[len(ids)-1]

	st, err := f.Store.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, outbox.Stats{Pending: 1, OldestPending: st.OldestPending, Dead: 1, OtherStatus: int64(len(statuses))}, *st)

	c := f.claim(outbox.ClaimParams{Limit: 100, Lease: hour, Ordered: true, BlockOnDead: true})
	require.Empty(t, c.Malformed, "rows of another status are not claimed as malformed")
	require.Equal(t, []int64{pending}, rowIDs(c.Messages), "only the pending row, not held back by the rows before it")
	require.Equal(t, 1, f.ack(false, c.Messages...))
	require.Empty(t, f.claimN(100).Messages, "nothing else to claim")

	st, err = f.Store.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, outbox.Stats{Dead: 1, SentLastMinute: 1, SentLastHour: 1, OtherStatus: int64(len(statuses))}, *st)
	require.EqualValues(t, len(statuses), f.count("status IS NULL OR status NOT IN (0, 1, 2)"), "their status is untouched")
}
