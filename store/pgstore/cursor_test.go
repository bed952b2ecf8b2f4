package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
)

// TestClaimCursorTakesWhatItPassedOver makes rows below the claim cursor due
// again while claims move on through a backlog, and checks that the claim
// that reaches the end of the backlog takes them, in the same call, with
// each kind of unordered claim: row leases, batch leases, held claims.
func TestClaimCursorTakesWhatItPassedOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []pgstore.Option
	}{
		{"RowLeases", nil},
		{"BatchLeases", []pgstore.Option{pgstore.WithBatchLease(true)}},
		{"HeldClaims", []pgstore.Option{pgstore.WithHeldClaims(true)}},
	} {
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
