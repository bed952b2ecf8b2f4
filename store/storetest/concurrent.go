package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

const (
	concurrentRows     = 2000
	concurrentClaimers = 4
	concurrentBatch    = 25
)

func (s *suite) concurrentClaimers(t *testing.T) {
	f := s.fresh(t)
	for i := 0; i < concurrentRows; i += 500 {
		msgs := make([]*outbox.Message, 500)
		for j := range msgs {
			msgs[j] = newMsg("order", fmt.Sprint(i+j), i+j)
		}
		f.write(msgs...)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		claimed = map[int64]int{} // row id -> claimer
		dupes   []string
		total   atomic.Int64
		wg      sync.WaitGroup
		errs    = make(chan error, concurrentClaimers)
	)
	for w := range concurrentClaimers {
		wg.Go(func() {
			for total.Load() < concurrentRows && ctx.Err() == nil {
				c, err := f.Store.Claim(ctx, outbox.ClaimParams{Limit: concurrentBatch, Lease: time.Hour})
				if err != nil {
					errs <- fmt.Errorf("claimer %d: %w", w, err)
					return
				}
				mu.Lock()
				for _, m := range c.Messages {
					if other, ok := claimed[m.RowID]; ok {
						dupes = append(dupes, fmt.Sprintf("row %d claimed by %d and %d", m.RowID, other, w))
					}
					claimed[m.RowID] = w
					if m.Attempt != 1 {
						dupes = append(dupes, fmt.Sprintf("row %d has attempt %d", m.RowID, m.Attempt))
					}
				}
				mu.Unlock()
				total.Add(int64(len(c.Messages)))
				if len(c.Messages) == 0 {
					idle(ctx) // the rest is locked by claims in flight
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Empty(t, dupes)
	require.Len(t, claimed, concurrentRows, "every row claimed once")
	require.EqualValues(t, concurrentRows, total.Load())
	require.Zero(t, f.count("retry_count <> 1"), "a row was claimed more than once")
}

func (s *suite) orderedConcurrent(t *testing.T) {
	s.orderedConcurrentWith(t, func(int) (slot, slots int) { return 0, 0 })
}

// orderedConcurrentWith runs concurrentClaimers ordered claimers, claimer i
// with the slot preference view(i) (outbox.ClaimParams.Slot and Slots),
// and checks that no row is handed out before the row before it in its
// aggregate was acknowledged.
func (s *suite) orderedConcurrentWith(t *testing.T, view func(i int) (slot, slots int)) {
	const aggregates, perAggregate = 8, 25
	f := s.fresh(t)
	var msgs []*outbox.Message
	for i := range perAggregate {
		for a := range aggregates {
			msgs = append(msgs, newMsg("order", fmt.Sprintf("agg-%d", a), i))
		}
	}
	ids := f.write(msgs...)
	// prev maps each row to the row before it in its aggregate (0 for the first).
	prev := map[int64]int64{}
	lastOf := map[string]int64{}
	for i, m := range msgs {
		prev[ids[i]] = lastOf[m.AggregateID]
		lastOf[m.AggregateID] = ids[i]
	}

	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	var (
		mu         sync.Mutex
		ackStarted = map[int64]bool{}
		bad        []string
		done       atomic.Int64
		wg         sync.WaitGroup
		errs       = make(chan error, concurrentClaimers)
	)
	for i := range concurrentClaimers {
		slot, slots := view(i)
		wg.Go(func() {
			for done.Load() < aggregates*perAggregate && ctx.Err() == nil {
				c, err := f.Store.Claim(ctx, outbox.ClaimParams{Limit: 5, Lease: time.Hour, Ordered: true, BlockOnDead: true,
					Slot: slot, Slots: slots})
				if err != nil {
					errs <- err
					return
				}
				if len(c.Messages) == 0 {
					idle(ctx) // every head is leased by another claimer
					continue
				}
				// A row may be handed out only once the ack of the row before it
				// in its aggregate has begun (it commits after that).
				mu.Lock()
				for _, m := range c.Messages {
					if p := prev[m.RowID]; p != 0 && !ackStarted[p] {
						bad = append(bad, fmt.Sprintf("%s: row %d handed out before row %d was acked", m.AggregateID, m.RowID, p))
					}
					if ackStarted[m.RowID] {
						bad = append(bad, fmt.Sprintf("%s: row %d handed out twice", m.AggregateID, m.RowID))
					}
					ackStarted[m.RowID] = true
				}
				mu.Unlock()
				n, err := f.Store.Ack(ctx, outbox.AckParams{Messages: c.Messages})
				if err != nil {
					errs <- err
					return
				}
				if n != len(c.Messages) {
					errs <- fmt.Errorf("acked %d of %d rows", n, len(c.Messages))
					return
				}
				done.Add(int64(n))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Empty(t, bad)
	require.EqualValues(t, aggregates*perAggregate, done.Load())
	require.Zero(t, f.count("status <> 1"), "every row sent")
}

// idle waits a moment before a claimer polls again.
func idle(ctx context.Context) {
	t := time.NewTimer(2 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
