package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
)

// timed returns newMsg with DeliverAt and ExpiresAt set (zero: unset).
func timed(aggID string, n int, deliverAt, expiresAt time.Time) *outbox.Message {
	m := newMsg("order", aggID, n)
	m.DeliverAt, m.ExpiresAt = deliverAt, expiresAt
	return m
}

// sameMicro asserts that got is want to the microsecond, the precision every
// store keeps (zero stays zero).
func sameMicro(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	if want.IsZero() {
		require.True(t, got.IsZero(), "%s: got %v, want none", what, got)
		return
	}
	near(t, want, got, time.Microsecond, what)
}

// delayRoundTrip writes delayed and expiring messages: a delayed one is
// not claimed before its time, its deliver_at and next_retry_at hold that
// time, and a claim hands DeliverAt and ExpiresAt back as written.
func (s *suite) delayRoundTrip(t *testing.T) {
	f := s.fresh(t)
	now := time.Now()
	in := []*outbox.Message{
		timed("1", 1, now.Add(hour), now.Add(2*hour)),
		timed("2", 2, time.Time{}, now.Add(hour)),
		timed("3", 3, now.Add(-hour), time.Time{}), // a time past is now
		newMsg("order", "4", 4),
	}
	ids := f.write(in...)
	sameMicro(t, in[0].DeliverAt, f.row(ids[0]).NextRetryAt, "next_retry_at of the delayed row")
	require.EqualValues(t, 1, f.count("id = ? AND deliver_at IS NOT NULL AND expires_at IS NOT NULL", ids[0]))
	require.EqualValues(t, 1, f.count("id = ? AND deliver_at IS NULL AND next_retry_at IS NULL", ids[3]),
		"a message without DeliverAt is written as before")

	c := f.claimN(10)
	require.Empty(t, c.Malformed)
	require.Equal(t, ids[1:], rowIDs(c.Messages), "the delayed row is not due")
	for i, m := range c.Messages {
		want := in[i+1]
		sameMicro(t, want.DeliverAt, m.DeliverAt, "DeliverAt")
		sameMicro(t, want.ExpiresAt, m.ExpiresAt, "ExpiresAt")
	}

	f.setTime("next_retry_at", time.Now().Add(-time.Second), ids[0]) // its time came
	c = f.claimN(10)
	require.Equal(t, ids[:1], rowIDs(c.Messages))
	sameMicro(t, in[0].DeliverAt, c.Messages[0].DeliverAt, "DeliverAt")
	sameMicro(t, in[0].ExpiresAt, c.Messages[0].ExpiresAt, "ExpiresAt")
}

// delayBecomesDue writes a message due in a moment: claims skip it until
// then, and take it once the database's clock passed it.
func (s *suite) delayBecomesDue(t *testing.T) {
	f := s.fresh(t)
	at := time.Now().Add(time.Second)
	ids := f.write(timed("1", 1, at, time.Time{}))
	require.Empty(t, f.claimN(10).Messages, "claimed before its time")
	var got *outbox.Claim
	testsvc.Eventually(t, 10*time.Second, func() bool {
		got = f.claimN(10)
		return len(got.Messages) > 0
	}, "the delayed message never became due")
	require.False(t, time.Now().Before(at), "claimed at %v, before its time %v", time.Now(), at)
	require.Equal(t, ids, rowIDs(got.Messages))
}

// delayOrderedHead writes a delayed first message of an aggregate: ordered
// claims hold back the aggregate's later message behind it, and not other
// aggregates, until it is due.
func (s *suite) delayOrderedHead(t *testing.T) {
	f := s.fresh(t)
	ids := f.write(timed("a", 1, time.Now().Add(hour), time.Time{}), newMsg("order", "a", 2), newMsg("order", "b", 3))
	p := outbox.ClaimParams{Limit: 10, Lease: hour, Ordered: true, BlockOnDead: true}
	c := f.claim(p)
	require.Equal(t, ids[2:], rowIDs(c.Messages), "a's second message waits behind the delayed first")
	f.setTime("next_retry_at", time.Now().Add(-time.Second), ids[0])
	c = f.claim(p)
	require.NotEmpty(t, c.Messages)
	require.Equal(t, ids[0], c.Messages[0].RowID, "the delayed head comes first")
}

// expiryThroughRelay runs a relay over expired rows: they are marked dead
// with a reason that starts with "expired", are listed as dead, and are
// not published; with ordering and DeadBlocks, an expired head holds back
// its aggregate.
func (s *suite) expiryThroughRelay(t *testing.T) {
	f := s.fresh(t)
	later := time.Now().Add(hour)
	ids := f.write(timed("a", 1, time.Time{}, later), newMsg("order", "a", 2), timed("b", 3, time.Time{}, later))
	f.setTime("expires_at", time.Now().Add(-time.Second), ids[0]) // the hour went by

	pub := outboxtest.NewPublisher()
	r, err := outbox.NewRelay(f.Store, pub, outbox.WithOrdering(true, outbox.DeadBlocks))
	require.NoError(t, err)
	for range 5 {
		ev, err := r.Step(t.Context())
		require.NoError(t, err)
		if ev.Claimed == 0 {
			break
		}
	}
	var sent []int64
	for _, m := range pub.Messages() {
		sent = append(sent, m.RowID)
	}
	require.Equal(t, ids[2:], sent, "only b's message is published: a's expired head blocks a")
	require.Equal(t, int(outbox.StatusDead), f.row(ids[0]).Status)
	reason := f.lastError(ids[0])
	require.True(t, strings.HasPrefix(reason.String, "expired"), "last_error %q", reason.String)
	require.Equal(t, int(outbox.StatusPending), f.row(ids[1]).Status)

	admin, ok := f.Store.(outbox.Admin)
	if !ok {
		return
	}
	dead, err := admin.ListDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, ids[0], dead[0].Message.RowID)
	require.True(t, strings.HasPrefix(dead[0].Reason, "expired"), "reason %q", dead[0].Reason)
	require.False(t, dead[0].Message.ExpiresAt.IsZero(), "the dead row shows its expiry")
}

// delayOnOldTable writes to a table without deliver_at and expires_at:
// messages that set neither go in as before; one that sets either is
// refused, saying to migrate, and nothing is written.
func (s *suite) delayOnOldTable(t *testing.T) {
	f := s.contract(t)
	f.write(newMsg("order", "1", 1))
	for _, m := range []*outbox.Message{
		timed("2", 2, time.Now().Add(hour), time.Time{}),
		timed("3", 3, time.Time{}, time.Now().Add(hour)),
	} {
		err := f.Write(t.Context(), newMsg("order", "4", 4), m)
		require.Error(t, err)
		require.Contains(t, err.Error(), "outbox migrate", "the error says to migrate")
	}
	require.EqualValues(t, 1, f.count(""), "the refused writes left nothing")
}

// delayedInFront puts 20,000 delayed rows (next_retry_at an hour ahead, as
// Write with DeliverAt leaves them) in front of (lower ids than) 300 due
// rows: claims of every kind take due rows only. It logs how long each
// claim took alone and behind the delayed rows, for docs/tuning.md
// ("Delayed messages").
func (s *suite) delayedInFront(t *testing.T) {
	const delayed, due = 20000, 300
	f := s.fresh(t)
	concat, analyze := "'%[1]s' || CAST(i AS CHAR(20))", "ANALYZE {t}"
	switch f.h.Dialect {
	case MySQL:
		concat, analyze = "CONCAT('%[1]s', i)", "ANALYZE TABLE {t}"
	case SQLite:
		analyze = "ANALYZE"
	case Postgres:
		concat = "'%[1]s' || i"
	}
	// i from lo + 1 to lo + n, through a cross join of 1,000 rows (MariaDB
	// stops a recursion at 1,000 by default).
	insert := func(lo, n int, cols string, vals string, args ...any) {
		t.Helper()
		f.exec(`INSERT INTO {t} (id, message_id, aggregate_type, aggregate_id, event_type, payload`+cols+`)
			WITH RECURSIVE r(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM r WHERE j < 999),
				n(i) AS (SELECT a.j + 1000 * b.j + 1 + ? FROM r AS a, r AS b WHERE a.j + 1000 * b.j < ?)
			SELECT i, `+vals+` FROM n`, append([]any{lo, n}, args...)...)
	}
	key := func(prefix string) string { return fmt.Sprintf(concat, prefix) }
	insert(1_000_000, due, "", key("p")+", 'order', "+key("p")+", 'E', '{}'")
	f.exec(analyze)
	cases := []outbox.ClaimParams{
		{Limit: 100, Lease: hour}, {Limit: 10, Lease: hour}, {Limit: 100, Lease: hour, Ordered: true, BlockOnDead: true},
	}
	claim := func(p outbox.ClaimParams) time.Duration {
		t.Helper()
		start := time.Now()
		c := f.claim(p)
		took := time.Since(start)
		require.Len(t, c.Messages, p.Limit)
		for _, m := range c.Messages {
			require.Equal(t, "p", m.AggregateID[:1], "a delayed row was claimed: %s", m.MessageID)
		}
		f.exec("UPDATE {t} SET next_retry_at = NULL, retry_count = 0 WHERE id > 1000000") // due again
		return took
	}
	alone := make([]time.Duration, len(cases))
	for i, p := range cases {
		claim(p) // the statements' first run
		alone[i] = claim(p)
	}
	later := f.h.Time(time.Now().Add(hour))
	insert(0, delayed, ", deliver_at, next_retry_at", key("d")+", 'order', "+key("d")+", 'E', '{}', ?, ?", later, later)
	f.exec(analyze)
	for i, p := range cases {
		claim(p)
		t.Logf("%s claim of %d (ordered %v), %d due rows: alone %v, behind %d delayed rows %v", f.h.Dialect,
			p.Limit, p.Ordered, due, alone[i].Round(10*time.Microsecond), delayed, claim(p).Round(10*time.Microsecond))
	}
}
