package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgstore"
)

// unorderedClaims are the kinds of unordered claim, each of which starts at
// the claim cursor.
var unorderedClaims = []struct {
	name string
	opts []pgstore.Option
}{
	{"RowLeases", nil},
	{"BatchLeases", []pgstore.Option{pgstore.WithBatchLease(true)}},
	{"HeldClaims", []pgstore.Option{pgstore.WithHeldClaims(true)}},
}

// TestClaimCursorTakesWhatItPassedOver makes rows below the claim cursor due
// again while claims move on through a backlog, and checks that the claim
// that reaches the end of the backlog takes them, in the same call, with
// each kind of unordered claim: row leases, batch leases, held claims.
func TestClaimCursorTakesWhatItPassedOver(t *testing.T) {
	t.Parallel()
	for _, tc := range unorderedClaims {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, _, _ := testsvc.PostgresSchema(t)
			// No rescan by the clock: the test is about the claim that reaches the end.
			opts := append([]pgstore.Option{pgstore.WithRescanEvery(time.Hour)}, tc.opts...)
			l := &leased{t: t, pool: pool, s: newStore(t, pool, opts...)}
			rows := l.write(30)
			claim := func() *outbox.Claim {
				t.Helper()
				c, err := l.s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Minute})
				require.NoError(t, err)
				if c.Held != nil { // should the test fail midway, the pool gets the connection back
					t.Cleanup(func() { _, _ = c.Held.Settle(context.Background(), outbox.SettleParams{}) })
				}
				return c
			}
			// Give a claim's rows back: due again, attempt not counted.
			refund := func(c *outbox.Claim) {
				t.Helper()
				retries := make([]outbox.Retry, len(c.Messages))
				for i, m := range c.Messages {
					retries[i] = outbox.Retry{Message: m, At: time.Now().Add(-time.Second)}
				}
				if c.Held != nil {
					_, err := c.Held.Settle(t.Context(), outbox.SettleParams{Refunds: retries})
					require.NoError(t, err)
					return
				}
				require.NoError(t, l.s.Reschedule(t.Context(), outbox.RescheduleParams{Retries: retries, Refund: true}))
			}
			settle := func(c *outbox.Claim) {
				t.Helper()
				if c.Held != nil {
					_, err := c.Held.Settle(t.Context(), outbox.SettleParams{Sent: c.Messages})
					require.NoError(t, err)
					return
				}
				_, err := l.s.Ack(t.Context(), outbox.AckParams{Messages: c.Messages})
				require.NoError(t, err)
			}

			a := claim()
			require.Equal(t, rows[:10], ids(a.Messages))
			b := claim()
			require.Equal(t, rows[10:20], ids(b.Messages), "the next claim starts after the first")
			refund(a)
			c := claim()
			require.Equal(t, rows[20:], ids(c.Messages), "full claims move on past the rows given back")
			d := claim()
			require.Equal(t, rows[:10], ids(d.Messages), "the claim that reached the end took them")
			for _, m := range d.Messages {
				require.Equal(t, 1, m.Attempt, "the refunded attempt was not counted")
			}
			e := claim()
			require.Empty(t, e.Messages, "everything is claimed")
			for _, x := range []*outbox.Claim{b, c, d} {
				settle(x)
			}
			require.Zero(t, count(t, pool, "SELECT count(*) FROM outbox_message WHERE status = 0"))
		})
	}
}

// TestClaimCursorRelaysDrainEverythingOnce drains a backlog with two relays,
// each with a Store (and so a claim cursor) of its own and 4 batches in
// flight, while writers add rows and a transaction that took the lowest id
// commits only once the relays are well past it: every message is published
// exactly once and nothing is left, with each kind of unordered claim.
func TestClaimCursorRelaysDrainEverythingOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range unorderedClaims {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool, _, _ := testsvc.PostgresSchema(t)
			w := outbox.NewWriter(newStore(t, pool, tc.opts...))
			write := func(tx pgx.Tx, n int, prefix string) {
				t.Helper()
				msgs := make([]*outbox.Message, n)
				for i := range msgs {
					msgs[i] = msg(fmt.Sprintf("%s-%d", prefix, i))
				}
				require.NoError(t, w.Write(ctx, tx, msgs...))
			}
			late, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer late.Rollback(ctx) //nolint:errcheck // committed below
			write(late, 1, "late")   // the lowest id, committed last
			const backlog = 3000
			for i := range backlog / 100 {
				require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					write(tx, 100, fmt.Sprintf("b%d", i))
					return nil
				}))
			}

			pub := outboxtest.NewPublisher()
			for i := range 2 {
				st, err := pgstore.New(pool, tc.opts...)
				require.NoError(t, err)
				r, err := outbox.NewRelay(st, pub, outbox.WithBatchSize(100), outbox.WithMaxInFlight(4),
					outbox.WithDeleteSent(true), outbox.WithPollInterval(20*time.Millisecond),
					outbox.WithName(fmt.Sprintf("r%d", i)))
				require.NoError(t, err)
				startRelay(t, r)
			}
			// Writers keep adding rows while the relays drain.
			const added = 20 * 10
			writers := make(chan struct{})
			go func() {
				defer close(writers)
				for i := range 20 {
					if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						write(tx, 10, fmt.Sprintf("w%d", i))
						return nil
					}); err != nil {
						t.Errorf("write: %v", err)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
			testsvc.Eventually(t, 30*time.Second, func() bool { return pub.Count() >= backlog/3 }, "a third published")
			require.NoError(t, late.Commit(ctx))
			<-writers

			total := backlog + added + 1
			testsvc.Eventually(t, 60*time.Second, func() bool {
				return pub.Count() >= total && count(t, pool, "SELECT count(*) FROM outbox_message") == 0
			}, "everything published and deleted")
			require.Equal(t, total, pub.Count())
			require.Empty(t, pub.Duplicates())
		})
	}
}
