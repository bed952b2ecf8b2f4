package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
)

// gatePublisher holds every Publish call until the test releases that call.
type gatePublisher struct {
	*outboxtest.Publisher
	calls chan gateCall
}

type gateCall struct {
	first   int64 // RowID of the batch's first message
	release chan struct{}
}

func newGatePublisher() *gatePublisher {
	return &gatePublisher{Publisher: outboxtest.NewPublisher(), calls: make(chan gateCall, 64)}
}

func (p *gatePublisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	c := gateCall{first: msgs[0].RowID, release: make(chan struct{})}
	p.calls <- c
	<-c.release
	return p.Publisher.Publish(ctx, msgs)
}

// next waits for the next Publish call.
func (p *gatePublisher) next(t *testing.T) gateCall {
	t.Helper()
	select {
	case c := <-p.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no Publish call within 10s")
		return gateCall{}
	}
}

// ackLog records the first RowID of every Ack, in the order they came.
type ackLog struct {
	outbox.Store
	mu    sync.Mutex
	order []int64
}

func (s *ackLog) Ack(ctx context.Context, p outbox.AckParams) (int, error) {
	s.mu.Lock()
	s.order = append(s.order, p.Messages[0].RowID)
	s.mu.Unlock()
	return s.Store.Ack(ctx, p)
}

func (s *ackLog) acks() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

// TestRelayPipeline runs a relay with three batches in flight against SQLite:
// it claims the next batches while earlier ones are at the broker, never more
// than three, acknowledges each one as soon as the broker confirmed it (a
// batch still at the broker holds up no other), and on shutdown finishes all
// of them and claims nothing new.
func TestRelayPipeline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, many(100)...)
	pub := newGatePublisher()
	st := &ackLog{Store: b.store}
	r := fastRelay(t, st, pub, outbox.WithBatchSize(10), outbox.WithMaxInFlight(3), outbox.WithOrdering(false, outbox.DeadBlocks))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	// Three batches reach the broker before any is confirmed, and no fourth.
	calls := []gateCall{pub.next(t), pub.next(t), pub.next(t)}
	require.Never(t, func() bool { return len(pub.calls) > 0 }, 200*time.Millisecond, 10*time.Millisecond,
		"a fourth batch was published while three were in flight")
	require.Equal(t, 30, b.count(t, "retry_count = 1"), "claimed beyond three batches")

	// The broker confirms the third first: it is acknowledged while the others wait,
	// and the freed slot lets a fourth batch go to the broker.
	close(calls[2].release)
	testsvc.Eventually(t, 5*time.Second, func() bool { return len(st.acks()) == 1 }, "the third batch acknowledged")
	require.Equal(t, []int64{calls[2].first}, st.acks())
	fourth := pub.next(t)
	require.Greater(t, fourth.first, calls[2].first)
	close(calls[0].release)
	close(calls[1].release)
	close(fourth.release)
	testsvc.Eventually(t, 5*time.Second, func() bool { return len(st.acks()) >= 4 }, "four acks")

	// Keep going, then stop while three more batches are at the broker.
	calls = []gateCall{pub.next(t), pub.next(t), pub.next(t)}
	require.Never(t, func() bool { return len(pub.calls) > 0 }, 100*time.Millisecond, 10*time.Millisecond,
		"a fourth batch was published while three were in flight")
	cancel()
	for _, c := range calls {
		close(c.release)
	}
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the batches in flight were confirmed")
	}
	acks := st.acks()
	require.Len(t, acks, 7)
	slices.Sort(acks)
	require.Equal(t, len(acks), len(slices.Compact(acks)), "a batch was acknowledged twice")
	require.Equal(t, 70, pub.Count())
	require.Empty(t, pub.Duplicates())
	require.Equal(t, 70, b.count(t, "status = 1"), "every batch in flight was acknowledged")
	require.Equal(t, 30, b.count(t, "status = 0 AND retry_count = 0"), "something was claimed after the stop")
}

// TestRelayPipelineDrains checks delivery, exactly once and in per-aggregate
// order, with several batches in flight, with and without ordering and with
// failures that send messages back for a retry.
func TestRelayPipelineDrains(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("Ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var all []*outbox.Message
			for i := range 150 {
				all = append(all, msg(fmt.Sprintf("agg-%d", i%7), i))
			}
			b.write(t, all...)
			pub := outboxtest.NewPublisher()
			var failed sync.Map
			pub.FailWith(func(m *outbox.Message) error { // the first attempt of every 5th message fails
				if m.Attempt == 1 && m.RowID%5 == 0 {
					if _, loaded := failed.LoadOrStore(m.MessageID, true); !loaded {
						return errors.New("transient")
					}
				}
				return nil
			})
			r := fastRelay(t, b.store, pub, outbox.WithBatchSize(16), outbox.WithMaxInFlight(4),
				outbox.WithOrdering(ordered, outbox.DeadBlocks))
			run(t, r)
			// Ordered, with retries, this takes about 10 s on a quiet machine
			// (0.7 s unordered): a known slowness of SQLite's ordered pipeline.
			testsvc.Eventually(t, 60*time.Second, func() bool { return b.count(t, "status = 1") == 150 }, "all sent")
			require.Equal(t, 150, len(pub.Messages()))
			require.Empty(t, pub.Duplicates())
			if ordered {
				last := map[string]int64{}
				for _, m := range pub.Messages() {
					require.Greater(t, m.RowID, last[m.AggregateID], "aggregate %s out of order", m.AggregateID)
					last[m.AggregateID] = m.RowID
				}
			}
		})
	}
}

// TestRelayPipelineDestinationDown: with batches in flight when the
// destination goes down, the relay gives every attempt back, probes one
// message at a time, and sends everything once it is back.
func TestRelayPipelineDestinationDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, many(60)...)
	pub := outboxtest.NewPublisher()
	pub.FailWith(func(*outbox.Message) error { return outbox.Unavailable(errors.New("connection refused")) })
	hook := &destHook{}
	run(t, fastRelay(t, b.store, pub, outbox.WithMaxAttempts(2), outbox.WithBatchSize(5), outbox.WithMaxInFlight(4),
		outbox.WithHooks(hook)))
	testsvc.Eventually(t, 5*time.Second, func() bool { return hook.downs.Load() > 0 }, "destination down")
	// Probe cycles come and go; none may spend an attempt.
	require.Never(t, func() bool { return b.count(t, "status = 2 OR retry_count > 1") > 0 },
		300*time.Millisecond, 20*time.Millisecond, "an outage spent attempts")
	pub.FailWith(nil)
	testsvc.Eventually(t, 10*time.Second, func() bool { return b.count(t, "status = 1") == 60 }, "all sent after recovery")
	require.EqualValues(t, 1, hook.downs.Load())
	require.EqualValues(t, 1, hook.ups.Load())
	require.Empty(t, pub.Duplicates())
}
