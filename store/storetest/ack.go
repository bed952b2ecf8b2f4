package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

func (s *suite) ackMarksSent(t *testing.T) {
	f := s.fresh(t)
	ids := f.writeN(4)
	c := f.claimN(3)
	require.Len(t, c.Messages, 3)

	require.Equal(t, 3, f.ack(false, c.Messages...))
	for _, id := range ids[:3] {
		require.Equal(t, 1, f.row(id).Status, "row %d", id)
	}
	require.Equal(t, 0, f.row(ids[3]).Status, "the unclaimed row is untouched")
	require.Equal(t, 0, f.ack(false, c.Messages...), "a second ack of sent rows changes nothing")

	f.expire(ids...)
	require.Equal(t, ids[3:], rowIDs(f.claimN(10).Messages), "sent rows are never claimed again")
}

func (s *suite) ackFenced(t *testing.T) {
	for _, c := range []struct {
		name    string
		attempt func(claimed int) int
		want    int
	}{
		{"SameAttempt", func(a int) int { return a }, 1},
		{"StaleAttempt", func(a int) int { return a - 1 }, 0},
		{"FutureAttempt", func(a int) int { return a + 1 }, 0},
		{"ZeroAttempt", func(int) int { return 0 }, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := s.fresh(t)
			id := f.writeN(1)[0]
			f.exec("UPDATE {t} SET retry_count = 2 WHERE id = ?", id)
			m := f.claimN(1).Messages[0]
			require.Equal(t, 3, m.Attempt)

			require.Equal(t, c.want, f.ack(false, withAttempt(m, c.attempt(m.Attempt))))
			require.Equal(t, c.want, f.row(id).Status, "status after ack")
		})
	}
	t.Run("MixedBatchCountsOnlyMatches", func(t *testing.T) {
		t.Parallel()
		f := s.fresh(t)
		f.writeN(3)
		ms := f.claimN(3).Messages
		require.Len(t, ms, 3)
		require.Equal(t, 2, f.ack(false, ms[0], withAttempt(ms[1], 7), ms[2]))
		require.Equal(t, 0, f.row(ms[1].RowID).Status)
	})
}

func (s *suite) ackAfterTakeover(t *testing.T) {
	f := s.fresh(t)
	ids := f.writeN(3)
	first := f.claimN(10).Messages
	require.Len(t, first, 3)

	// The first relay stalls past its lease; a second relay takes the rows over.
	f.expire(ids...)
	second := f.claimN(10).Messages
	require.Equal(t, ids, rowIDs(second))
	for _, m := range second {
		require.Equal(t, 2, m.Attempt)
	}

	// The stalled relay comes back: none of its calls may touch the rows.
	require.Equal(t, 0, f.ack(false, first[0]), "ack by the relay that lost its lease")
	require.Equal(t, 0, f.ack(true, first[0]), "delete-ack by the relay that lost its lease")
	f.reschedule(false, time.Now().Add(-time.Minute), "late", first[1])
	f.reschedule(true, time.Now().Add(-time.Minute), "late", first[1])
	f.kill("late", first[2])
	for _, id := range ids {
		r := f.row(id)
		require.Equal(t, 0, r.Status, "row %d", id)
		require.Equal(t, 2, r.RetryCount, "row %d", id)
		require.True(t, r.NextRetryAt.After(time.Now().Add(30*time.Minute)), "row %d lost the second lease", id)
		require.False(t, f.lastError(id).Valid, "row %d got a last_error from a fenced call", id)
	}
	require.Equal(t, 3, f.ack(false, second...), "the relay that holds the lease acks")
}

func (s *suite) ackDelete(t *testing.T) {
	f := s.fresh(t)
	ids := f.writeN(4)
	c := f.claimN(3)
	require.Zero(t, f.ack(true, withAttempt(c.Messages[0], 5)), "a fenced delete removes nothing")
	require.EqualValues(t, 4, f.count(""))

	require.Equal(t, 3, f.ack(true, c.Messages...))
	require.EqualValues(t, 1, f.count(""))
	require.EqualValues(t, 1, f.count("id = ?", ids[3]), "only the unclaimed row is left")
	require.Equal(t, 0, f.ack(true, c.Messages...), "deleting again changes nothing")
}

func (s *suite) emptyCalls(t *testing.T) {
	f := s.fresh(t)
	id := f.writeN(1)[0]
	ctx := t.Context()

	n, err := f.Store.Ack(ctx, outbox.AckParams{})
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = f.Store.Ack(ctx, outbox.AckParams{Delete: true})
	require.NoError(t, err)
	require.Zero(t, n)
	require.NoError(t, f.Store.Reschedule(ctx, outbox.RescheduleParams{}))
	require.NoError(t, f.Store.Reschedule(ctx, outbox.RescheduleParams{Refund: true}))
	require.NoError(t, f.Store.Kill(ctx, outbox.KillParams{}))
	require.Equal(t, row{}, f.row(id), "the row is untouched")
}

func (s *suite) reschedule(t *testing.T) {
	for _, c := range []struct {
		name        string
		refund      bool
		wantRetries int // retry_count after the reschedule
	}{
		{"CountsTheAttempt", false, 1},
		{"RefundGivesItBack", true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := s.fresh(t)
			ids := f.writeN(2)
			ms := f.claimN(2).Messages
			require.Len(t, ms, 2)

			at := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
			f.reschedule(c.refund, at, "broker said no", ms[0])
			r := f.row(ids[0])
			require.Equal(t, 0, r.Status)
			require.Equal(t, c.wantRetries, r.RetryCount)
			near(t, at, r.NextRetryAt, time.Millisecond, "next_retry_at = Retry.At")
			require.Equal(t, "broker said no", f.lastError(ids[0]).String)

			f.expire(ids[1])
			require.Equal(t, ids[1:], rowIDs(f.claimN(10).Messages), "the rescheduled row waits for its time")

			f.expire(ids[0])
			again := f.claimN(10).Messages
			require.Equal(t, ids[:1], rowIDs(again))
			require.Equal(t, c.wantRetries+1, again[0].Attempt)
		})
	}
	t.Run("InThePastIsDueAtOnce", func(t *testing.T) {
		t.Parallel()
		f := s.fresh(t)
		ids := f.writeN(1)
		m := f.claimN(1).Messages[0]
		f.reschedule(false, time.Now().Add(-time.Second), "x", m)
		again := f.claimN(1).Messages
		require.Equal(t, ids, rowIDs(again))
		require.Equal(t, 2, again[0].Attempt)
	})
	t.Run("PerMessageTimesAndErrors", func(t *testing.T) {
		t.Parallel()
		f := s.fresh(t)
		ids := f.writeN(2)
		ms := f.claimN(2).Messages
		at0 := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		at1 := time.Now().Add(3 * time.Hour).Truncate(time.Millisecond)
		require.NoError(t, f.Store.Reschedule(t.Context(), outbox.RescheduleParams{Retries: []outbox.Retry{
			{Message: ms[0], At: at0, Err: "first"},
			{Message: ms[1], At: at1, Err: "second"},
		}}))
		near(t, at0, f.row(ids[0]).NextRetryAt, time.Millisecond, "row 0")
		near(t, at1, f.row(ids[1]).NextRetryAt, time.Millisecond, "row 1")
		require.Equal(t, "first", f.lastError(ids[0]).String)
		require.Equal(t, "second", f.lastError(ids[1]).String)
	})
}

func (s *suite) rescheduleFenced(t *testing.T) {
	f := s.fresh(t)
	id := f.writeN(1)[0]
	m := f.claimN(1).Messages[0]
	before := f.row(id)

	for _, refund := range []bool{false, true} {
		f.reschedule(refund, time.Now().Add(-time.Hour), "stale", withAttempt(m, m.Attempt+1))
		f.reschedule(refund, time.Now().Add(-time.Hour), "stale", withAttempt(m, m.Attempt-1))
	}
	require.Equal(t, before, f.row(id), "fenced reschedules changed the row")
	require.False(t, f.lastError(id).Valid)
	require.Empty(t, f.claimN(1).Messages, "still leased")
}

func (s *suite) kill(t *testing.T) {
	f := s.fresh(t)
	ids := f.writeN(3)
	ms := f.claimN(3).Messages
	require.NoError(t, f.Store.Kill(t.Context(), outbox.KillParams{Dead: []outbox.Dead{
		{Message: ms[0], Reason: "attempts exhausted"},
		{Message: ms[2], Reason: "unroutable"},
	}}))
	for i, want := range []struct {
		status int
		reason string
	}{{2, "attempts exhausted"}, {0, ""}, {2, "unroutable"}} {
		require.Equal(t, want.status, f.row(ids[i]).Status, "row %d", i)
		require.Equal(t, want.reason, f.lastError(ids[i]).String, "row %d", i)
	}
	f.expire(ids...)
	require.Equal(t, ids[1:2], rowIDs(f.claimN(10).Messages), "dead rows are never claimed")
	require.Equal(t, 0, f.ack(false, ms[0]), "a dead row cannot be acked")
	st, err := f.Store.Stats(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Dead)
}

func (s *suite) killFenced(t *testing.T) {
	f := s.fresh(t)
	id := f.writeN(1)[0]
	m := f.claimN(1).Messages[0]
	f.kill("stale", withAttempt(m, m.Attempt+1))
	f.kill("stale", withAttempt(m, m.Attempt-1))
	require.Equal(t, 0, f.row(id).Status)
	require.False(t, f.lastError(id).Valid)

	require.Equal(t, 1, f.ack(false, m))
	f.kill("after ack", m)
	require.Equal(t, 1, f.row(id).Status, "a sent row cannot be killed")
}

// MaxErrorLength is the most bytes of an error or reason the suite expects
// a store to keep in last_error; longer texts are cut at a character
// boundary.
const MaxErrorLength = 4096

// Error texts from brokers may be long or not UTF-8 (which a strict text
// column refuses, failing the whole batch): last_error keeps valid UTF-8 of
// at most MaxErrorLength bytes.
func (s *suite) lastErrorIsBounded(t *testing.T) {
	f := s.fresh(t)
	ids := f.writeN(3)
	ms := f.claimN(3).Messages
	long := strings.Repeat("é", MaxErrorLength) // 2 bytes each
	require.NoError(t, f.Store.Reschedule(t.Context(), outbox.RescheduleParams{Retries: []outbox.Retry{
		{Message: ms[0], At: time.Now(), Err: "short"}, // a short first row must not narrow the column
		{Message: ms[1], At: time.Now(), Err: long},
	}}))
	f.kill("bad \xff byte", ms[2])
	require.Equal(t, "short", f.lastError(ids[0]).String)
	require.Equal(t, strings.Repeat("é", MaxErrorLength/2), f.lastError(ids[1]).String)
	require.Equal(t, "bad \uFFFD byte", f.lastError(ids[2]).String)
}

// A batch larger than a statement takes runs as several statements: every
// message is written, claimed in id order, and settled once.
func (s *suite) largeBatches(t *testing.T) {
	if s.h.Chunked == nil {
		t.Skip("Harness.Chunked is nil")
	}
	f := &fx{Fixture: s.h.Chunked(t, 100), t: t, h: &s.h}
	const n = 345 // several statements' worth for insert, claim, ack, reschedule and kill
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = newMsg("order", fmt.Sprint(i), i)
		msgs[i].Headers = map[string]string{"i": fmt.Sprint(i)}
	}
	ids := f.write(msgs...)
	c := f.claimN(n)
	require.Equal(t, ids, rowIDs(c.Messages))
	require.EqualValues(t, n, f.count("retry_count = 1"), "every claimed row leased")
	for i, m := range c.Messages {
		require.Equal(t, fmt.Sprint(i), m.AggregateID)
		require.Equal(t, fmt.Sprint(i), m.Headers["i"])
	}
	third := n / 3
	var retries []outbox.Retry
	for _, m := range c.Messages[third : 2*third] {
		retries = append(retries, outbox.Retry{Message: m, At: time.Now().Add(time.Hour), Err: "later"})
	}
	var dead []outbox.Dead
	for _, m := range c.Messages[2*third:] {
		dead = append(dead, outbox.Dead{Message: m, Reason: "poison"})
	}
	acks := slices.Clone(c.Messages[:third])
	slices.Reverse(acks) // the store sorts what it locks
	require.Equal(t, third, f.ack(false, acks...))
	require.NoError(t, f.Store.Reschedule(t.Context(), outbox.RescheduleParams{Retries: retries, Refund: true}))
	require.NoError(t, f.Store.Kill(t.Context(), outbox.KillParams{Dead: dead}))

	st, err := f.Store.Stats(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, third, st.SentLastMinute)
	require.EqualValues(t, len(retries), st.Pending)
	require.EqualValues(t, len(dead), st.Dead)
	require.EqualValues(t, len(retries), f.count("retry_count = 0 AND last_error = 'later'"))
}
