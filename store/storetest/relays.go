package storetest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
)

// relaysEndToEnd runs three real relays with per-aggregate ordering on one
// table while four writers commit messages of six aggregates, with a quarter
// of the first attempts failing: every message must be published, and within
// an aggregate in id order.
func (s *suite) relaysEndToEnd(t *testing.T) {
	const writers, perWriter, aggregates = 4, 30, 6
	f := s.fresh(t)
	pub := outboxtest.NewPublisher()
	pub.FailWith(func(m *outbox.Message) error {
		h := fnv.New32a()
		h.Write([]byte(m.MessageID))
		if m.Attempt == 1 && h.Sum32()%4 == 0 {
			return errors.New("flaky broker")
		}
		return nil
	})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var relays sync.WaitGroup
	runErrs := make(chan error, 3)
	for i := range 3 {
		r, err := outbox.NewRelay(f.Store, pub,
			outbox.WithName(fmt.Sprint("relay-", i)),
			outbox.WithBatchSize(10),
			outbox.WithPollInterval(20*time.Millisecond),
			outbox.WithBackoff(10*time.Millisecond, 50*time.Millisecond),
			outbox.WithPublishTimeout(500*time.Millisecond),
			outbox.WithLease(5*time.Second),
			outbox.WithOrdering(true, outbox.DeadBlocks))
		require.NoError(t, err)
		relays.Go(func() { runErrs <- r.Run(ctx) })
	}

	// Each aggregate's transactions take turns, as docs/ordering.md asks of
	// writers (lock the aggregate before writing its message): ids then
	// follow commit order within an aggregate, which ordering relies on.
	var aggLocks [aggregates]sync.Mutex
	var writing sync.WaitGroup
	for w := range writers {
		writing.Go(func() {
			for i := range perWriter {
				a := (w + i) % aggregates
				m := &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprint("agg-", a), EventType: "E",
					Payload: fmt.Appendf(nil, `{"w":%d,"i":%d}`, w, i)}
				aggLocks[a].Lock()
				err := f.Write(ctx, m)
				aggLocks[a].Unlock()
				if err != nil {
					t.Errorf("write: %v", err)
					return
				}
			}
		})
	}
	writing.Wait()

	testsvc.Eventually(t, 30*time.Second, func() bool {
		return distinct(pub.Messages()) == writers*perWriter
	}, "not every message was published")
	cancel()
	relays.Wait()
	close(runErrs)
	for err := range runErrs {
		require.NoError(t, err, "a clean stop returns nil")
	}

	require.EqualValues(t, writers*perWriter, f.count("status = 1"))
	last := map[string]int64{}
	for _, m := range firstDeliveries(pub.Messages()) {
		require.Greater(t, m.RowID, last[m.AggregateID], "aggregate %s: row %d published after row %d", m.AggregateID, m.RowID, last[m.AggregateID])
		last[m.AggregateID] = m.RowID
	}
}

func distinct(ms []*outbox.Message) int {
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.MessageID] = true
	}
	return len(seen)
}

// firstDeliveries returns each message's first delivery, in delivery order.
func firstDeliveries(ms []*outbox.Message) []*outbox.Message {
	seen := map[string]bool{}
	var out []*outbox.Message
	for _, m := range ms {
		if !seen[m.MessageID] {
			seen[m.MessageID] = true
			out = append(out, m)
		}
	}
	return out
}
