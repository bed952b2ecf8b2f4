package pgstore_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgstore"
)

// batchSizes records the size of every claimed batch.
type batchSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (b *batchSizes) OnBatch(ev outbox.BatchEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ev.Claimed > 0 {
		b.sizes = append(b.sizes, ev.Claimed)
	}
}

func (b *batchSizes) total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.sizes {
		n += s
	}
	return n
}

func (b *batchSizes) get() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.sizes...)
}

// TestRelaySizesItselfOnPostgres drains a backlog on PostgreSQL with the
// relay's default sizing, with row leases, held claims and ordering: the
// batches grow from the smallest to the largest, never past it, every
// message is delivered once the backlog is gone, and a trickle afterwards
// goes out in small batches.
func TestRelaySizesItselfOnPostgres(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		opts               []pgstore.Option
		relay              []outbox.RelayOption
		aggs               int
		minBatch, maxBatch int
		largest            int // the largest batch the drain must reach
	}{
		{"RowLeases", nil, nil, 1, outbox.DefaultMinBatchSize, outbox.DefaultMaxBatchSize, outbox.DefaultMaxBatchSize},
		{"HeldClaims", []pgstore.Option{pgstore.WithHeldClaims(true)}, nil, 1,
			outbox.DefaultMinBatchSize, outbox.DefaultMaxBatchSize, outbox.DefaultMaxBatchSize},
		// Ordered claims take one message per aggregate at a time: 400 aggregates make claims of at most 400.
		{"Ordered", nil, []outbox.RelayOption{outbox.WithOrdering(true, outbox.DeadBlocks)}, 400,
			outbox.DefaultMinBatchSize, outbox.DefaultMaxBatchSize, 400},
		{"Bounds", nil, []outbox.RelayOption{outbox.WithBatchSizeRange(5, 300), outbox.WithMaxInFlightRange(1, 2)}, 1, 5, 300, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newOrderedFixture(t, tc.opts...)
			const backlog = 12_000
			aggs := make([]string, tc.aggs)
			for i := range aggs {
				aggs[i] = fmt.Sprint(i)
			}
			f.writeInterleaved(t, aggs, backlog/tc.aggs)
			sizes := &batchSizes{}
			pub := outboxtest.NewPublisher()
			r, err := outbox.NewRelay(f.store, pub, append([]outbox.RelayOption{outbox.WithOrdering(false, outbox.DeadBlocks), outbox.WithHooks(sizes),
				outbox.WithPollInterval(100 * time.Millisecond)}, tc.relay...)...)
			require.NoError(t, err)
			startRelay(t, r)
			testsvc.Eventually(t, time.Minute, func() bool { return sizes.total() == backlog }, "the backlog drains")
			require.Equal(t, backlog, pub.Count())

			drained := sizes.get()
			require.Equal(t, tc.minBatch, drained[0], "starts small")
			require.Contains(t, drained, tc.largest, "grows to the largest batch the table allows")
			for _, n := range drained {
				require.LessOrEqual(t, n, tc.maxBatch)
			}

			// A trickle after the backlog: a message at a time, each in a small batch.
			for i := range 5 {
				f.write(t, fmt.Sprintf("t%d", i), 1)
				testsvc.Eventually(t, 10*time.Second, func() bool { return sizes.total() == backlog+i+1 }, "the trickle is delivered")
			}
			trickle := sizes.get()[len(drained):]
			require.NotEmpty(t, trickle)
			for _, n := range trickle {
				require.Equal(t, 1, n)
			}
		})
	}
}
