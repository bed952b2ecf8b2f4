package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
)

func (s *suite) claimInIDOrder(t *testing.T) { s.onBothTables(t, s.checkClaimInIDOrder) }

// onBothTables runs check on a migrated table and on one with only the
// contract's columns and indexes, in parallel subtests.
func (s *suite) onBothTables(t *testing.T, check func(t *testing.T, f *fx)) {
	t.Run("MigratedTable", func(t *testing.T) {
		t.Parallel()
		check(t, s.fresh(t))
	})
	t.Run("ContractOnlyTable", func(t *testing.T) {
		t.Parallel()
		check(t, s.contract(t))
	})
}

func (s *suite) checkClaimInIDOrder(t *testing.T, f *fx) {
	ids := f.writeN(5)
	// Rewrite an indexed column of the oldest rows and set it back, so that
	// where a database keeps new row versions at the end of the heap, storage
	// (and index) order is no longer id order.
	f.setTime("next_retry_at", time.Now().Add(-time.Hour), ids[0], ids[1])
	f.exec("UPDATE {t} SET next_retry_at = NULL WHERE id IN (?, ?)", ids[0], ids[1])

	c := f.claimN(3)
	require.Empty(t, c.Malformed)
	require.Equal(t, ids[:3], rowIDs(c.Messages), "first claim takes the oldest rows in id order")
	for _, m := range c.Messages {
		require.Equal(t, 1, m.Attempt, "row %d", m.RowID)
		require.NotEmpty(t, m.MessageID)
	}

	c = f.claimN(10)
	require.Equal(t, ids[3:], rowIDs(c.Messages), "second claim takes the rest, skipping leased rows")

	c = f.claimN(10)
	require.Empty(t, c.Messages, "every row is leased")
	require.Empty(t, c.Malformed)
	for _, id := range ids {
		r := f.row(id)
		require.Equal(t, 0, r.Status, "claimed rows stay pending")
		require.Equal(t, 1, r.RetryCount, "the claim counted the attempt in the table")
	}
}

func (s *suite) claimAttempt(t *testing.T) {
	for _, retryCount := range []int{0, 1, 4} {
		t.Run(fmt.Sprintf("RetryCount%d", retryCount), func(t *testing.T) {
			t.Parallel()
			f := s.fresh(t)
			id := f.writeN(1)[0]
			f.exec("UPDATE {t} SET retry_count = ? WHERE id = ?", retryCount, id)

			c := f.claimN(1)
			require.Len(t, c.Messages, 1)
			require.Equal(t, retryCount+1, c.Messages[0].Attempt)
			require.Equal(t, retryCount+1, f.row(id).RetryCount)
		})
	}
}

func (s *suite) claimSetsLease(t *testing.T) {
	f := s.fresh(t)
	f.writeN(2)
	for _, lease := range []time.Duration{time.Hour, 10 * time.Minute} {
		before := time.Now()
		c := f.claim(outbox.ClaimParams{Limit: 1, Lease: lease})
		require.Len(t, c.Messages, 1)
		r := f.row(c.Messages[0].RowID)
		near(t, before.Add(lease), r.NextRetryAt, 5*time.Second, "next_retry_at after a claim with lease "+lease.String())
	}
	require.Empty(t, f.claimN(10).Messages, "both rows leased")
}

func (s *suite) claimAfterLeaseExpires(t *testing.T) {
	f := s.fresh(t)
	ids := f.writeN(1)

	lease := 300 * time.Millisecond
	start := time.Now()
	c := f.claim(outbox.ClaimParams{Limit: 10, Lease: lease})
	require.Equal(t, ids, rowIDs(c.Messages))
	require.Empty(t, f.claim(outbox.ClaimParams{Limit: 10, Lease: lease}).Messages,
		"a second claim inside the lease gets nothing")

	var again *outbox.Claim
	testsvc.Eventually(t, 10*time.Second, func() bool {
		again = f.claim(outbox.ClaimParams{Limit: 10, Lease: time.Hour})
		return len(again.Messages) > 0
	}, "the row was not claimable after its lease of %v", lease)
	require.GreaterOrEqual(t, time.Since(start), lease/2, "claimed again long before the lease ended")
	require.Equal(t, ids, rowIDs(again.Messages))
	require.Equal(t, 2, again.Messages[0].Attempt, "the second claim is the second attempt")
}

func (s *suite) claimSkipsNotDue(t *testing.T) {
	f := s.fresh(t)
	ids := f.writeN(6)
	now := time.Now()
	f.setTime("next_retry_at", now.Add(time.Hour), ids[1])    // retrying later
	f.setTime("next_retry_at", now.Add(-time.Hour), ids[2])   // due again
	f.setTime("next_retry_at", now.Add(-time.Second), ids[3]) // just due
	f.exec("UPDATE {t} SET status = 1 WHERE id = ?", ids[4])  // sent
	f.exec("UPDATE {t} SET status = 2 WHERE id = ?", ids[5])  // dead

	c := f.claimN(10)
	require.Equal(t, []int64{ids[0], ids[2], ids[3]}, rowIDs(c.Messages))
}

func (s *suite) claimRejectsBadLimit(t *testing.T) {
	f := s.fresh(t)
	f.writeN(1)
	for _, limit := range []int{0, -1} {
		_, err := f.Store.Claim(t.Context(), outbox.ClaimParams{Limit: limit, Lease: time.Hour})
		require.Error(t, err, "limit %d", limit)
	}
	require.Len(t, f.claimN(1).Messages, 1, "the bad claims took nothing")
}

func (s *suite) claimHonoursContext(t *testing.T) {
	f := s.fresh(t)
	f.writeN(1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := f.Store.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Hour})
	require.Error(t, err)
	require.True(t, errors.Is(err, context.Canceled), "error %v does not wrap context.Canceled", err)
	require.Len(t, f.claimN(10).Messages, 1, "the cancelled claim took nothing")
}
