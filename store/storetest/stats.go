package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
