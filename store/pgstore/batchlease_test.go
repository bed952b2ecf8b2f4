package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgstore"
)

// leased is a batch-lease store on a fresh table, with helpers.
type leased struct {
	t    *testing.T
	pool *pgxpool.Pool
	s    *pgstore.Store
}

func newLeased(t *testing.T, opts ...pgstore.Option) *leased {
	t.Helper()
	pool, _, _ := testsvc.PostgresSchema(t)
	return &leased{t: t, pool: pool, s: newStore(t, pool, append([]pgstore.Option{pgstore.WithBatchLease(true)}, opts...)...)}
}

func (l *leased) write(n int) []int64 {
	l.t.Helper()
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = msg(fmt.Sprintf("a-%d", i))
	}
	w := outbox.NewWriter(l.s)
	require.NoError(l.t, pgx.BeginFunc(l.t.Context(), l.pool, func(tx pgx.Tx) error { return w.Write(l.t.Context(), tx, msgs...) }))
	ids := make([]int64, n)
	rows, err := l.pool.Query(l.t.Context(), "SELECT id FROM outbox_message ORDER BY id DESC LIMIT $1", n)
	require.NoError(l.t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(l.t, err)
	for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
		ids[i], ids[j] = ids[j], ids[i]
	}
	return ids
}

func (l *leased) claim(limit int, lease time.Duration) []*outbox.Message {
	l.t.Helper()
	c, err := l.s.Claim(l.t.Context(), outbox.ClaimParams{Limit: limit, Lease: lease})
	require.NoError(l.t, err)
	return c.Messages
}

// row returns a row's status, retry_count and whether next_retry_at is set.
func (l *leased) row(id int64) (status, retries int, scheduled bool) {
	l.t.Helper()
	require.NoError(l.t, l.pool.QueryRow(l.t.Context(),
		"SELECT status, retry_count, next_retry_at IS NOT NULL FROM outbox_message WHERE id = $1", id).
		Scan(&status, &retries, &scheduled))
	return
}

func ids(msgs []*outbox.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.RowID
	}
	return out
}

func TestBatchLeaseClaim(t *testing.T) {
	t.Parallel()
	l := newLeased(t)
	rows := l.write(5)
	first := l.claim(3, time.Hour)
	require.Equal(t, rows[:3], ids(first), "in id order")
	for _, m := range first {
		require.Equal(t, 1, m.Attempt)
	}
	require.Equal(t, rows[3:], ids(l.claim(10, time.Hour)), "the second claim skips the leased rows")
	require.Empty(t, l.claim(10, time.Hour), "everything is leased")
	for _, id := range rows {
		status, retries, scheduled := l.row(id)
		require.Equal(t, []any{0, 0, false}, []any{status, retries, scheduled}, "a claim only reads row %d", id)
	}
	require.Equal(t, 2, count(t, l.pool, "SELECT count(*) FROM outbox_message_lease"), "one lease row per batch")
	require.Equal(t, 5, count(t, l.pool, "SELECT sum(cardinality(ids)) FROM outbox_message_lease"))

	// Acknowledging takes the rows out of their lease and counts the attempt.
	n, err := l.s.Ack(t.Context(), outbox.AckParams{Messages: first})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for _, id := range rows[:3] {
		status, retries, _ := l.row(id)
		require.Equal(t, []int{1, 1}, []int{status, retries})
	}
	require.Equal(t, 2, count(t, l.pool, "SELECT sum(cardinality(ids)) FROM outbox_message_lease"))
	n, err = l.s.Ack(t.Context(), outbox.AckParams{Messages: first})
	require.NoError(t, err)
	require.Zero(t, n, "a second ack changes nothing")
}

func TestBatchLeaseAttemptIsRetryCountPlusOne(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{0, 1, 4} {
		t.Run(fmt.Sprint(retries), func(t *testing.T) {
			t.Parallel()
			l := newLeased(t)
			id := l.write(1)[0]
			exec(t, l.pool, "UPDATE outbox_message SET retry_count = $1", retries)
			m := l.claim(1, time.Hour)[0]
			require.Equal(t, retries+1, m.Attempt)
			n, err := l.s.Ack(t.Context(), outbox.AckParams{Messages: []*outbox.Message{m}, Delete: true})
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Zero(t, count(t, l.pool, "SELECT count(*) FROM outbox_message WHERE id = $1", id))
		})
	}
}

// TestBatchLeaseExpiry: a relay claims and stalls. Once its lease runs out,
// the next claim counts the unfinished attempt and takes the rows, and the
// stalled relay's late calls change nothing.
func TestBatchLeaseExpiry(t *testing.T) {
	t.Parallel()
	l := newLeased(t)
	rows := l.write(3)
	stale := l.claim(10, 300*time.Millisecond)
	require.Len(t, stale, 3)
	require.Empty(t, l.claim(10, time.Hour), "inside the lease")

	var fresh []*outbox.Message
	testsvc.Eventually(t, 10*time.Second, func() bool {
		fresh = l.claim(10, time.Hour)
		return len(fresh) > 0
	}, "claimable after the lease")
	require.Equal(t, rows, ids(fresh))
	for _, m := range fresh {
		require.Equal(t, 2, m.Attempt, "the unfinished attempt was counted")
		_, retries, _ := l.row(m.RowID)
		require.Equal(t, 1, retries)
	}

	// The stalled relay comes back.
	ctx := t.Context()
	n, err := l.s.Ack(ctx, outbox.AckParams{Messages: stale[:1]})
	require.NoError(t, err)
	require.Zero(t, n, "ack")
	n, err = l.s.Ack(ctx, outbox.AckParams{Messages: stale[:1], Delete: true})
	require.NoError(t, err)
	require.Zero(t, n, "delete")
	require.NoError(t, l.s.Reschedule(ctx, outbox.RescheduleParams{Retries: []outbox.Retry{
		{Message: stale[1], At: time.Now().Add(-time.Hour), Err: "late"}}}))
	require.NoError(t, l.s.Kill(ctx, outbox.KillParams{Dead: []outbox.Dead{{Message: stale[2], Reason: "late"}}}))
	for _, id := range rows {
		status, retries, scheduled := l.row(id)
		require.Equal(t, []any{0, 1, false}, []any{status, retries, scheduled}, "row %d after the stale calls", id)
	}
	require.Empty(t, l.claim(10, time.Hour), "the stale calls did not free the new owner's rows")

	n, err = l.s.Ack(ctx, outbox.AckParams{Messages: fresh})
	require.NoError(t, err)
	require.Equal(t, 3, n, "the new owner acknowledges")
}

// TestBatchLeaseSettlePartly: a batch is settled in parts; the part that
// was never settled (the relay died) gets its attempt counted once, at the
// lease's end, and the settled parts are not counted again.
func TestBatchLeaseSettlePartly(t *testing.T) {
	t.Parallel()
	l := newLeased(t)
	rows := l.write(4)
	ctx := t.Context()
	b := l.claim(10, 400*time.Millisecond)
	require.Len(t, b, 4)
	n, err := l.s.Ack(ctx, outbox.AckParams{Messages: b[:1]})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, l.s.Reschedule(ctx, outbox.RescheduleParams{Retries: []outbox.Retry{
		{Message: b[1], At: time.Now().Add(time.Hour), Err: "nack"}}}))
	require.NoError(t, l.s.Reschedule(ctx, outbox.RescheduleParams{Refund: true, Retries: []outbox.Retry{
		{Message: b[2], At: time.Now().Add(time.Hour), Err: "down"}}}))
	// b[3] is never settled.
	var again []*outbox.Message
	testsvc.Eventually(t, 10*time.Second, func() bool {
		again = l.claim(10, time.Hour)
		return len(again) > 0
	}, "the unsettled row back after the lease")
	require.Equal(t, rows[3:], ids(again))
	require.Equal(t, 2, again[0].Attempt)
	for i, want := range [][2]int{{1, 1}, {0, 1}, {0, 0}, {0, 1}} { // status, retry_count
		status, retries, _ := l.row(rows[i])
		require.Equal(t, want, [2]int{status, retries}, "row %d", i)
	}
	require.Zero(t, count(t, l.pool, "SELECT count(*) FROM outbox_message_lease WHERE expires_at <= now()"),
		"the expired lease was dropped")
}

func TestBatchLeaseRescheduleAndKill(t *testing.T) {
	t.Parallel()
	l := newLeased(t)
	rows := l.write(3)
	ctx := t.Context()
	b := l.claim(10, time.Hour)
	require.NoError(t, l.s.Reschedule(ctx, outbox.RescheduleParams{Retries: []outbox.Retry{
		{Message: b[0], At: time.Now().Add(-time.Second), Err: "nack"}}}))
	require.NoError(t, l.s.Kill(ctx, outbox.KillParams{Dead: []outbox.Dead{{Message: b[1], Reason: "poison"}}}))
	status, retries, scheduled := l.row(rows[0])
	require.Equal(t, []any{0, 1, true}, []any{status, retries, scheduled}, "rescheduled")
	status, retries, _ = l.row(rows[1])
	require.Equal(t, []int{2, 1}, []int{status, retries}, "dead")
	var reason string
	require.NoError(t, l.pool.QueryRow(ctx, "SELECT last_error FROM outbox_message WHERE id = $1", rows[1]).Scan(&reason))
	require.Equal(t, "poison", reason)

	// The rescheduled row is due again at once (its lease does not hold it), on its second attempt.
	again := l.claim(10, time.Hour)
	require.Equal(t, rows[:1], ids(again))
	require.Equal(t, 2, again[0].Attempt)
}

// TestBatchLeaseConcurrentClaimers: eight claimers drain a table at once;
// no row is ever handed out twice.
func TestBatchLeaseConcurrentClaimers(t *testing.T) {
	t.Parallel()
	l := newLeased(t, pgstore.WithAsyncCommit(true))
	const n = 3000
	l.write(n)
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				c, err := l.s.Claim(context.Background(), outbox.ClaimParams{Limit: 37, Lease: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				if len(c.Messages) == 0 {
					return
				}
				mu.Lock()
				for _, m := range c.Messages {
					seen[m.RowID]++
				}
				mu.Unlock()
				if _, err := l.s.Ack(context.Background(), outbox.AckParams{Messages: c.Messages}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, n)
	for id, k := range seen {
		require.Equal(t, 1, k, "row %d claimed %d times", id, k)
	}
	require.Equal(t, n, count(t, l.pool, "SELECT count(*) FROM outbox_message WHERE status = 1 AND retry_count = 1"))
}

func TestBatchLeaseOrdered(t *testing.T) {
	t.Parallel()
	l := newLeased(t)
	w := outbox.NewWriter(l.s)
	var msgs []*outbox.Message
	for i := range 6 {
		msgs = append(msgs, msg(fmt.Sprintf("agg-%d", i%2)))
	}
	require.NoError(t, pgx.BeginFunc(t.Context(), l.pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, msgs...) }))
	c, err := l.s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Hour, Ordered: true})
	require.NoError(t, err)
	require.Len(t, c.Messages, 2, "one head per aggregate")
	require.NotEqual(t, c.Messages[0].AggregateID, c.Messages[1].AggregateID)
	c2, err := l.s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Hour, Ordered: true})
	require.NoError(t, err)
	require.Empty(t, c2.Messages, "the heads are in flight")
	_, err = l.s.Ack(t.Context(), outbox.AckParams{Messages: c.Messages})
	require.NoError(t, err)
	c3, err := l.s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Hour, Ordered: true})
	require.NoError(t, err)
	require.Len(t, c3.Messages, 2, "the next heads")
}

// TestBatchLeaseCrashLoopEndsDead: a message whose relay dies on every
// attempt still goes dead after max attempts, since each expired lease
// counts the attempt.
func TestBatchLeaseCrashLoopEndsDead(t *testing.T) {
	t.Parallel()
	l := newLeased(t)
	id := l.write(1)[0]
	for attempt := 1; attempt <= 3; attempt++ {
		var c []*outbox.Message
		testsvc.Eventually(t, 10*time.Second, func() bool { c = l.claim(1, 100*time.Millisecond); return len(c) == 1 },
			"claim %d", attempt)
		require.Equal(t, attempt, c[0].Attempt)
		// ... the relay dies here, every time ...
	}
	pub := outboxtest.NewPublisher()
	r, err := outbox.NewRelay(l.s, pub, outbox.WithMaxAttempts(3), outbox.WithPollInterval(20*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = outboxtest.FlushAndWait(ctx, r, l.s)
	require.NoError(t, err)
	require.Zero(t, pub.Count(), "never published")
	status, retries, _ := l.row(id)
	require.Equal(t, []int{2, 4}, []int{status, retries}, "dead on its fourth claim")
}

// TestBatchLeaseRelay drains with the root relay (batches in flight, retries,
// a poison message, deletes) and with a crash after publish.
func TestBatchLeaseRelay(t *testing.T) {
	t.Parallel()
	l := newLeased(t)
	l.write(500)
	exec(t, l.pool, "UPDATE outbox_message SET aggregate_id = 'poison' WHERE id = (SELECT min(id) + 7 FROM outbox_message)")
	pub := outboxtest.NewPublisher()
	var failed sync.Map
	pub.FailWith(func(m *outbox.Message) error {
		switch {
		case m.AggregateID == "poison":
			return outbox.Permanent(errors.New("rejected"))
		case m.RowID%9 == 0:
			if _, loaded := failed.LoadOrStore(m.MessageID, true); !loaded {
				return errors.New("transient")
			}
		}
		return nil
	})
	crashing := outboxtest.NewCrashingStore(l.s, outboxtest.CrashAfterPublish, 1)
	r, err := outbox.NewRelay(crashing, pub, outbox.WithBatchSize(40), outbox.WithMaxInFlight(3),
		outbox.WithDeleteSent(true), outbox.WithBackoff(time.Millisecond, 5*time.Millisecond),
		outbox.WithPollInterval(20*time.Millisecond))
	require.NoError(t, err)
	startRelay(t, r)
	testsvc.Eventually(t, 30*time.Second, func() bool {
		return count(t, l.pool, "SELECT count(*) FROM outbox_message") == 1
	}, "drained but the poison row")
	require.Equal(t, 1, count(t, l.pool, "SELECT count(*) FROM outbox_message WHERE status = 2 AND aggregate_id = 'poison'"))
	// What the batch of the injected crash had sent went out twice, nothing else.
	dups := len(pub.Duplicates())
	require.Positive(t, dups)
	require.LessOrEqual(t, dups, 40)
	require.Len(t, pub.Messages(), 499+dups)
}

func TestBatchLeaseNeedsItsTable(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	newStore(t, pool) // migrated without the option: no lease table
	s, err := pgstore.New(pool, pgstore.WithBatchLease(true))
	require.NoError(t, err)
	_, err = s.Claim(t.Context(), outbox.ClaimParams{Limit: 1, Lease: time.Minute})
	require.ErrorContains(t, err, "run Migrate with WithBatchLease")
	require.NoError(t, s.Migrate(t.Context()))
	_, err = s.Claim(t.Context(), outbox.ClaimParams{Limit: 1, Lease: time.Minute})
	require.NoError(t, err)
}

// TestClaimRefusesLiveBatchLeases: a Store without batch leases (row leases
// or held claims) on a table that a batch-leasing relay is claiming would
// see that relay's claimed rows as pending and publish them again, so its
// claim fails with what to do; once the leases are settled it claims.
func TestClaimRefusesLiveBatchLeases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []pgstore.Option
	}{{"RowLeases", nil}, {"HeldClaims", []pgstore.Option{pgstore.WithHeldClaims(true)}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLeased(t)
			rows := l.write(4)
			leased := l.claim(2, time.Minute)
			require.Equal(t, rows[:2], ids(leased))

			other, err := pgstore.New(l.pool, tc.opts...)
			require.NoError(t, err)
			_, err = other.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Minute})
			require.ErrorContains(t, err, "holds live batch leases")
			require.ErrorContains(t, err, "give every relay of a table the same setting")

			n, err := l.s.Ack(t.Context(), outbox.AckParams{Messages: leased})
			require.NoError(t, err)
			require.Equal(t, 2, n)
			c, err := other.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, rows[2:], ids(c.Messages), "the batch-leased rows were settled; the rest is claimed")
			if c.Held != nil {
				_, err = c.Held.Settle(t.Context(), outbox.SettleParams{Sent: c.Messages})
				require.NoError(t, err)
			}
		})
	}
}

// TestBatchLeaseRecoversHostileCounts: a batch lease that runs out counts
// the attempt of its rows before they can be claimed again. A row whose
// retry_count another program set to the integer's limit, or to NULL or a
// negative number, must not make that count overflow (which failed every
// claim of the table from then on) or stay uncounted: the next claim takes
// the good rows and the limit row, which comes back malformed.
func TestBatchLeaseRecoversHostileCounts(t *testing.T) {
	t.Parallel()
	l := newLeased(t)
	ctx := t.Context()
	exec(t, l.pool, "ALTER TABLE outbox_message ALTER COLUMN retry_count DROP NOT NULL")
	rows := l.write(4)
	for i, rc := range []any{2147483647, 2147483646, nil, -7} {
		exec(t, l.pool, "UPDATE outbox_message SET retry_count = $1 WHERE id = $2", rc, rows[i])
	}
	c, err := l.s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, rows[2:], ids(c.Messages))
	require.Len(t, c.Malformed, 2)
	// Nothing is settled: the lease runs out, and the next claim recovers it.
	var again *outbox.Claim
	testsvc.Eventually(t, 10*time.Second, func() bool {
		again, err = l.s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Hour})
		require.NoError(t, err, "the recovery of the expired lease")
		return len(again.Messages)+len(again.Malformed) > 0
	}, "the rows back after the lease")
	require.Equal(t, rows[2:], ids(again.Messages))
	for _, m := range again.Messages {
		require.Equal(t, 2, m.Attempt, "row %d: the lost attempt was counted", m.RowID)
	}
	require.Len(t, again.Malformed, 2)
	for i, bad := range again.Malformed {
		require.Equal(t, rows[i], bad.Message.RowID)
		require.Equal(t, math.MaxInt32, bad.Message.Attempt)
		require.ErrorContains(t, bad.Err, fmt.Sprintf("row %d: retry_count reached 2147483647", rows[i]))
	}
	require.NoError(t, l.s.Kill(ctx, outbox.KillParams{Dead: []outbox.Dead{
		{Message: again.Malformed[0].Message, Reason: "malformed"}, {Message: again.Malformed[1].Message, Reason: "malformed"}}}))
	for _, id := range rows[:2] {
		status, retries, _ := l.row(id)
		require.Equal(t, [2]int{2, math.MaxInt32}, [2]int{status, retries}, "row %d killed", id)
	}
}
