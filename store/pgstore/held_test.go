package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgstore"
)

func newHeld(t *testing.T, opts ...pgstore.Option) *leased {
	t.Helper()
	pool, _, _ := testsvc.PostgresSchema(t)
	return &leased{t: t, pool: pool, s: newStore(t, pool, append([]pgstore.Option{pgstore.WithHeldClaims(true)}, opts...)...)}
}

func (l *leased) heldClaim(limit int, del bool) *outbox.Claim {
	l.t.Helper()
	c, err := l.s.Claim(l.t.Context(), outbox.ClaimParams{Limit: limit, Lease: time.Minute, Delete: del})
	require.NoError(l.t, err)
	return c
}

// holders lists the client connections, other than the caller's, whose
// transactions hold a lock on the test's table.
const holders = `SELECT DISTINCT a.pid FROM pg_locks l JOIN pg_stat_activity a USING (pid)
	WHERE l.relation = 'outbox_message'::regclass AND a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()`

// inTx counts the connections whose open transactions hold the test's table.
func (l *leased) inTx() int {
	l.t.Helper()
	return count(l.t, l.pool, "SELECT count(*) FROM ("+holders+") AS h")
}

func TestHeldClaimCommitsWhatWasSent(t *testing.T) {
	t.Parallel()
	for _, del := range []bool{false, true} {
		t.Run(fmt.Sprintf("delete=%v", del), func(t *testing.T) {
			t.Parallel()
			l := newHeld(t)
			rows := l.write(5)
			c := l.heldClaim(3, del)
			require.NotNil(t, c.Held, "an unordered claim with WithHeldClaims is held")
			require.Equal(t, rows[:3], ids(c.Messages), "claims in id order")
			for _, m := range c.Messages {
				require.Equal(t, 1, m.Attempt)
			}
			// Other claims skip the held rows, and until the commit the rows are
			// pending to every other transaction.
			other := l.heldClaim(10, del)
			require.Equal(t, rows[3:], ids(other.Messages))
			require.Equal(t, 5, count(t, l.pool, "SELECT count(*) FROM outbox_message WHERE status = 0"))

			n, err := c.Held.Settle(t.Context(), outbox.SettleParams{Sent: c.Messages})
			require.NoError(t, err)
			require.Equal(t, 3, n)
			if del {
				require.Equal(t, 2, count(t, l.pool, "SELECT count(*) FROM outbox_message"))
			} else {
				for _, id := range rows[:3] {
					status, retries, _ := l.row(id)
					require.Equal(t, 1, status)
					require.Equal(t, 1, retries, "a sent row records its attempt, as with leases")
				}
			}
			_, err = c.Held.Settle(t.Context(), outbox.SettleParams{Sent: c.Messages})
			require.ErrorContains(t, err, "already settled")

			// A claim that finds nothing leaves no transaction open.
			n, err = other.Held.Settle(t.Context(), outbox.SettleParams{Sent: other.Messages})
			require.NoError(t, err)
			require.Equal(t, 2, n)
			empty := l.heldClaim(10, del)
			require.Empty(t, empty.Messages)
			require.Nil(t, empty.Held)
			require.Zero(t, l.inTx(), "no transaction left open")
		})
	}
}

// TestHeldClaimSettlesFailures: when some messages of a held batch fail, the
// claim is rolled back and each message settled with its attempt counted
// (retry, dead) or given back (refund), while the sent ones are acknowledged.
func TestHeldClaimSettlesFailures(t *testing.T) {
	t.Parallel()
	for _, del := range []bool{false, true} {
		t.Run(fmt.Sprintf("delete=%v", del), func(t *testing.T) {
			t.Parallel()
			l := newHeld(t)
			rows := l.write(4)
			c := l.heldClaim(4, del)
			require.Len(t, c.Messages, 4)
			sent, retry, refund, dead := c.Messages[0], c.Messages[1], c.Messages[2], c.Messages[3]
			at := time.Now().Add(time.Hour)
			n, err := c.Held.Settle(t.Context(), outbox.SettleParams{
				Sent:    []*outbox.Message{sent},
				Retries: []outbox.Retry{{Message: retry, At: at, Err: "broker said no"}},
				Refunds: []outbox.Retry{{Message: refund, At: at, Err: "broker down"}},
				Dead:    []outbox.Dead{{Message: dead, Reason: "too large"}},
			})
			require.NoError(t, err)
			require.Equal(t, 1, n)

			if del {
				require.Zero(t, count(t, l.pool, "SELECT count(*) FROM outbox_message WHERE id = $1", rows[0]))
			} else {
				status, retries, _ := l.row(rows[0])
				require.Equal(t, []int{1, 1}, []int{status, retries}, "sent")
			}
			status, retries, scheduled := l.row(rows[1])
			require.Equal(t, []int{0, 1}, []int{status, retries}, "retry: pending, attempt counted")
			require.True(t, scheduled)
			status, retries, scheduled = l.row(rows[2])
			require.Equal(t, []int{0, 0}, []int{status, retries}, "refund: pending, attempt not counted")
			require.True(t, scheduled)
			status, retries, _ = l.row(rows[3])
			require.Equal(t, []int{2, 1}, []int{status, retries}, "dead, attempt counted")
			require.Equal(t, "broker said no", text(t, l, "SELECT last_error FROM outbox_message WHERE id = $1", rows[1]))
			require.Equal(t, "too large", text(t, l, "SELECT last_error FROM outbox_message WHERE id = $1", rows[3]))
			require.Empty(t, l.heldClaim(10, del).Messages, "nothing due: the retries wait for their time")
			require.Zero(t, l.inTx())
		})
	}
}

func text(t *testing.T, l *leased, sql string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, l.pool.QueryRow(t.Context(), sql, args...).Scan(&s))
	return s
}

// TestHeldClaimRollsBackWhenTheRelayDies: a held batch whose connection dies
// before it is settled (the relay process was killed) is pending again, as
// it was, and the next claim takes it.
func TestHeldClaimRollsBackWhenTheRelayDies(t *testing.T) {
	t.Parallel()
	l := newHeld(t)
	rows := l.write(3)
	c := l.heldClaim(3, true)
	require.Len(t, c.Messages, 3)
	require.Equal(t, 1, l.inTx())
	var pid int
	require.NoError(t, l.pool.QueryRow(t.Context(), holders).Scan(&pid))
	_, err := l.pool.Exec(t.Context(), "SELECT pg_terminate_backend($1)", pid)
	require.NoError(t, err)

	_, err = c.Held.Settle(t.Context(), outbox.SettleParams{Sent: c.Messages})
	require.Error(t, err, "the commit cannot succeed on a dead connection")
	// pg_terminate_backend only signals: the backend rolls back as it exits.
	testsvc.Eventually(t, 10*time.Second, func() bool { return l.inTx() == 0 }, "the killed transaction is still there")
	again := l.heldClaim(10, true)
	require.Equal(t, rows, ids(again.Messages), "every row is claimable again")
	for _, m := range again.Messages {
		require.Equal(t, 1, m.Attempt, "the attempt that never finished is not counted")
	}
	_, err = again.Held.Settle(t.Context(), outbox.SettleParams{Sent: again.Messages})
	require.NoError(t, err)
	require.Zero(t, count(t, l.pool, "SELECT count(*) FROM outbox_message"))
}

// TestHeldClaimLeaseEndsAStalledTransaction: a held batch that is not
// settled within the claim's lease (the relay was paused, or cut off from
// the database) has its session ended by the server; its rows are pending
// again for the next claim, and the late settle fails instead of writing.
// A batch settled within its lease is untouched, and the timeout does not
// outlive the claim's transaction.
func TestHeldClaimLeaseEndsAStalledTransaction(t *testing.T) {
	t.Parallel()
	l := newHeld(t)
	rows := l.write(4)
	claim := func(limit int, lease time.Duration) *outbox.Claim {
		t.Helper()
		c, err := l.s.Claim(t.Context(), outbox.ClaimParams{Limit: limit, Lease: lease, Delete: true})
		require.NoError(t, err)
		if c.Held != nil {
			// Should the test fail midway, its connection goes back to the pool,
			// which otherwise waits for it on closing.
			t.Cleanup(func() { _, _ = c.Held.Settle(context.Background(), outbox.SettleParams{}) })
		}
		return c
	}
	stalled := claim(2, time.Second)
	require.Equal(t, rows[:2], ids(stalled.Messages))
	settled := claim(2, time.Minute)
	require.Equal(t, rows[2:], ids(settled.Messages))
	time.Sleep(1500 * time.Millisecond) // the first lease is over, the second is not
	testsvc.Eventually(t, 10*time.Second, func() bool { return l.inTx() == 1 }, "the stalled transaction is still open")

	again := claim(10, time.Minute)
	require.Equal(t, rows[:2], ids(again.Messages), "the stalled batch is claimable again")
	for _, m := range again.Messages {
		require.Equal(t, 1, m.Attempt, "the attempt that never finished is not counted")
	}
	_, err := stalled.Held.Settle(t.Context(), outbox.SettleParams{Sent: stalled.Messages})
	require.Error(t, err, "the late settle cannot commit")
	n, err := settled.Held.Settle(t.Context(), outbox.SettleParams{Sent: settled.Messages})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = again.Held.Settle(t.Context(), outbox.SettleParams{Sent: again.Messages})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Zero(t, count(t, l.pool, "SELECT count(*) FROM outbox_message"))

	// The setting was the transactions' own: every session is back to the server's.
	var def string
	require.NoError(t, l.pool.QueryRow(t.Context(),
		"SELECT reset_val FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'").Scan(&def))
	conns := l.pool.AcquireAllIdle(t.Context())
	require.NotEmpty(t, conns)
	for _, c := range conns {
		var v string
		require.NoError(t, c.QueryRow(t.Context(),
			"SELECT setting FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'").Scan(&v))
		require.Equal(t, def, v)
		c.Release()
	}
}

func TestHeldClaimOptions(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	_, err := pgstore.New(pool, pgstore.WithHeldClaims(true), pgstore.WithBatchLease(true))
	require.ErrorContains(t, err, "choose one")

	// Ordered claims are leased as without the option.
	l := newHeld(t)
	rows := l.write(2)
	c, err := l.s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Minute, Ordered: true, Delete: true})
	require.NoError(t, err)
	require.Nil(t, c.Held)
	require.Len(t, c.Messages, 2)
	status, retries, scheduled := l.row(rows[0])
	require.Equal(t, []int{0, 1}, []int{status, retries})
	require.True(t, scheduled, "row lease")
	n, err := l.s.Ack(t.Context(), outbox.AckParams{Messages: c.Messages, Delete: true})
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

// TestHeldClaimRelays drains a backlog with three relays on one table, each
// with several held batches in flight, while the publisher refuses some
// messages for good and fails others once: every message is published, none
// twice when nothing dies, the refused ones are dead, and no transaction is
// left open.
func TestHeldClaimRelays(t *testing.T) {
	t.Parallel()
	for _, del := range []bool{false, true} {
		t.Run(fmt.Sprintf("delete=%v", del), func(t *testing.T) {
			t.Parallel()
			l := newHeld(t, pgstore.WithAsyncCommit(true))
			const n = 3000
			msgs := make([]*outbox.Message, n)
			for i := range msgs {
				msgs[i] = msg(fmt.Sprintf("a-%d", i))
			}
			w := outbox.NewWriter(l.s)
			require.NoError(t, pgx.BeginFunc(t.Context(), l.pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, msgs...) }))

			pub := outboxtest.NewPublisher()
			var mu sync.Mutex
			failedOnce := map[string]bool{}
			pub.FailWith(func(m *outbox.Message) error {
				var k int
				fmt.Sscanf(m.AggregateID, "a-%d", &k)
				switch {
				case k%500 == 7:
					return outbox.Permanent(errors.New("refused"))
				case k%100 == 3:
					mu.Lock()
					defer mu.Unlock()
					if !failedOnce[m.MessageID] {
						failedOnce[m.MessageID] = true
						return errors.New("try again")
					}
				}
				return nil
			})
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			for range 3 {
				relay, err := outbox.NewRelay(l.s, pub, outbox.WithBatchSize(100), outbox.WithMaxInFlight(3),
					outbox.WithDeleteSent(del), outbox.WithPollInterval(20*time.Millisecond),
					outbox.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
				require.NoError(t, err)
				wg.Go(func() { require.NoError(t, relay.Run(ctx)) })
			}
			dead := n / 500
			testsvc.Eventually(t, 60*time.Second, func() bool {
				return count(t, l.pool, "SELECT count(*) FROM outbox_message WHERE status = 0") == 0
			}, "backlog not drained")
			cancel()
			wg.Wait()

			require.Equal(t, n-dead, pub.Count(), "every message but the refused ones is published")
			require.Empty(t, pub.Duplicates(), "no message published twice")
			require.Equal(t, dead, count(t, l.pool, "SELECT count(*) FROM outbox_message WHERE status = 2"))
			if !del {
				require.Equal(t, n-dead, count(t, l.pool, "SELECT count(*) FROM outbox_message WHERE status = 1"))
			}
			// A claim cut short by the stop closes its connection; the server
			// ends that transaction when it notices.
			testsvc.Eventually(t, 10*time.Second, func() bool { return l.inTx() == 0 }, "a transaction is left open")
		})
	}
}

// TestHeldClaimKillsMalformedRows: a row the relay cannot decode (here an
// empty message_id) is claimed with the others, and the relay marks it dead
// in the batch's transaction while the good rows go out.
func TestHeldClaimKillsMalformedRows(t *testing.T) {
	t.Parallel()
	l := newHeld(t)
	l.write(1)
	_, err := l.pool.Exec(t.Context(), `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ('', 'order', 'bad', 'ORDER_PAID', '{}')`)
	require.NoError(t, err)
	l.write(1)

	pub := outboxtest.NewPublisher()
	relay, err := outbox.NewRelay(l.s, pub, outbox.WithDeleteSent(true))
	require.NoError(t, err)
	ev, err := relay.Step(t.Context())
	require.NoError(t, err)
	require.Equal(t, outbox.BatchEvent{Claimed: 3, Sent: 2, Dead: 1}, outbox.BatchEvent{Claimed: ev.Claimed, Sent: ev.Sent, Dead: ev.Dead})
	require.Equal(t, 2, pub.Count())
	require.Equal(t, 1, count(t, l.pool, "SELECT count(*) FROM outbox_message"))
	require.Equal(t, 1, count(t, l.pool,
		"SELECT count(*) FROM outbox_message WHERE status = 2 AND retry_count = 1 AND last_error LIKE '%message_id is empty%'"))
	require.Zero(t, l.inTx())
}
