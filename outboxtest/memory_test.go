package outboxtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
)

// write commits one message per aggregate id, in order.
func write(t *testing.T, s *outboxtest.MemoryStore, aggs ...string) {
	t.Helper()
	w := outbox.NewWriter[*outboxtest.MemoryTx](s)
	tx := s.Begin()
	for _, a := range aggs {
		require.NoError(t, w.Write(t.Context(), tx, &outbox.Message{
			AggregateType: "order", AggregateID: a, EventType: "E", Payload: []byte(`{}`),
		}))
	}
	require.NoError(t, tx.Commit())
}

func ids(c *outbox.Claim) []string {
	var out []string
	for _, m := range c.Messages {
		out = append(out, m.AggregateID)
	}
	return out
}

func TestMemoryStoreClaims(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		aggs  []string
		p     outbox.ClaimParams
		first []string // what the first claim takes
		again []string // what a second claim takes while the first is leased
	}{
		{"Unordered", []string{"a", "a", "b"}, outbox.ClaimParams{Limit: 10, Lease: time.Minute}, []string{"a", "a", "b"}, nil},
		{"Limit", []string{"a", "b", "c"}, outbox.ClaimParams{Limit: 2, Lease: time.Minute}, []string{"a", "b"}, []string{"c"}},
		{"OrderedHeadsOnly", []string{"a", "a", "b", "a"}, outbox.ClaimParams{Limit: 10, Lease: time.Minute, Ordered: true},
			[]string{"a", "b"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := outboxtest.NewMemoryStore()
			write(t, s, tc.aggs...)
			c, err := s.Claim(t.Context(), tc.p)
			require.NoError(t, err)
			require.Equal(t, tc.first, ids(c))
			for _, m := range c.Messages {
				require.Equal(t, 1, m.Attempt, "the claim counts the attempt")
			}
			c2, err := s.Claim(t.Context(), tc.p)
			require.NoError(t, err)
			require.Equal(t, tc.again, ids(c2), "leased rows are not handed out again")
		})
	}
}

func TestMemoryStoreSettles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	claimAll := outbox.ClaimParams{Limit: 10, Lease: time.Minute}
	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		s := outboxtest.NewMemoryStore()
		tx := s.Begin()
		require.NoError(t, s.InsertTx(ctx, tx, []*outbox.Message{{AggregateID: "a"}}))
		require.NoError(t, tx.Rollback())
		require.ErrorIs(t, tx.Commit(), outboxtest.ErrTxDone)
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		require.Zero(t, st.Pending)
	})
	t.Run("AckIsFenced", func(t *testing.T) {
		t.Parallel()
		s := outboxtest.NewMemoryStore()
		write(t, s, "a")
		c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 1, Lease: -time.Second}) // a lease already over
		require.NoError(t, err)
		stale := c.Messages[0]
		c2, err := s.Claim(ctx, claimAll)
		require.NoError(t, err)
		require.Equal(t, 2, c2.Messages[0].Attempt, "taken over")
		n, err := s.Ack(ctx, outbox.AckParams{Messages: []*outbox.Message{stale}})
		require.NoError(t, err)
		require.Zero(t, n, "the first claim's ack is fenced off")
		n, err = s.Ack(ctx, outbox.AckParams{Messages: c2.Messages})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.Stats{SentLastMinute: 1, SentLastHour: 1}, *st)
	})
	t.Run("DeleteRemovesOnlyTheAcked", func(t *testing.T) {
		t.Parallel()
		s := outboxtest.NewMemoryStore()
		write(t, s, "a", "b")
		c, err := s.Claim(ctx, claimAll)
		require.NoError(t, err)
		n, err := s.Ack(ctx, outbox.AckParams{Messages: c.Messages[:1]})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = s.Ack(ctx, outbox.AckParams{Messages: c.Messages[1:], Delete: true})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.Stats{SentLastMinute: 1, SentLastHour: 1}, *st, "the row kept as sent stays")
	})
	t.Run("RefundedRetryIsDueAgain", func(t *testing.T) {
		t.Parallel()
		s := outboxtest.NewMemoryStore()
		write(t, s, "a")
		c, err := s.Claim(ctx, claimAll)
		require.NoError(t, err)
		require.NoError(t, s.Reschedule(ctx, outbox.RescheduleParams{Refund: true,
			Retries: []outbox.Retry{{Message: c.Messages[0], At: time.Now().Add(-time.Second), Err: "down"}}}))
		c, err = s.Claim(ctx, claimAll)
		require.NoError(t, err)
		require.Equal(t, 1, c.Messages[0].Attempt, "a refund does not count the attempt")
	})
	t.Run("DeadBlocksItsAggregate", func(t *testing.T) {
		t.Parallel()
		s := outboxtest.NewMemoryStore()
		write(t, s, "a", "a", "b")
		ordered := outbox.ClaimParams{Limit: 10, Lease: time.Minute, Ordered: true}
		c, err := s.Claim(ctx, ordered)
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b"}, ids(c))
		require.NoError(t, s.Kill(ctx, outbox.KillParams{Dead: []outbox.Dead{{Message: c.Messages[0], Reason: "refused"}}}))
		blocking := ordered
		blocking.BlockOnDead = true
		blocked, err := s.Claim(ctx, blocking)
		require.NoError(t, err)
		require.Empty(t, ids(blocked), "a's second row waits behind its dead head")
		skipped, err := s.Claim(ctx, ordered)
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, ids(skipped), "without BlockOnDead the dead head is skipped")
		dead := s.Dead()
		require.Len(t, dead, 1)
		require.Equal(t, "refused", dead[0].Reason)
	})
}

func TestMemoryStoreDelaysAndKeepsExpiry(t *testing.T) {
	t.Parallel()
	s := outboxtest.NewMemoryStore()
	w := outbox.NewWriter[*outboxtest.MemoryTx](s)
	tx := s.Begin()
	later, expiry := time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	require.NoError(t, w.Write(t.Context(), tx,
		&outbox.Message{AggregateType: "order", AggregateID: "late", EventType: "E", Payload: []byte(`{}`), DeliverAt: later},
		&outbox.Message{AggregateType: "order", AggregateID: "now", EventType: "E", Payload: []byte(`{}`), ExpiresAt: expiry},
	))
	require.NoError(t, tx.Commit())
	c, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, []string{"now"}, ids(c), "the delayed message is not due")
	require.True(t, c.Messages[0].ExpiresAt.Equal(expiry), "the claim hands ExpiresAt back")
}
