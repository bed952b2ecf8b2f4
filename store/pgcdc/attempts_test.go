package pgcdc_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgcdc"
)

// errCrashed is what a crashed relay's store calls return: the process is
// gone, nothing it would have written reaches the table.
var errCrashed = errors.New("relay crashed")

// crashable is a Source as the relay of a process sees it: once crashed,
// every claim and settle fails, as if the process had died at that moment,
// so that only what the table already holds survives.
type crashable struct {
	*pgcdc.Source
	crashed atomic.Bool
}

func (c *crashable) Claim(ctx context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	if c.crashed.Load() {
		return nil, errCrashed
	}
	return c.Source.Claim(ctx, p)
}

func (c *crashable) Ack(ctx context.Context, p outbox.AckParams) (int, error) {
	if c.crashed.Load() {
		return 0, errCrashed
	}
	return c.Source.Ack(ctx, p)
}

func (c *crashable) Reschedule(ctx context.Context, p outbox.RescheduleParams) error {
	if c.crashed.Load() {
		return errCrashed
	}
	return c.Source.Reschedule(ctx, p)
}

func (c *crashable) Kill(ctx context.Context, p outbox.KillParams) error {
	if c.crashed.Load() {
		return errCrashed
	}
	return c.Source.Kill(ctx, p)
}

// TestCrashingMessageGoesDead: a message whose publish crashes the relay
// every time (source and relay die mid-publish, a new pair reads it again
// from the slot) goes dead once its attempts, counted in the table by each
// claim, pass the relay's max attempts, as with polling. With attempts in
// memory only (WithTableAttempts(false)) every new relay starts it again at
// attempt 1: it would be read again forever.
func TestCrashingMessageGoesDead(t *testing.T) {
	t.Parallel()
	const maxAttempts = 3
	for _, tc := range []struct {
		name    string
		inTable bool
	}{{"TableAttempts", true}, {"MemoryAttempts", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, false)
			pub := outboxtest.NewPublisher()
			var cur atomic.Pointer[crashable]
			var crashes atomic.Int32
			var seen []int // the attempt of each publish of the poison message
			seenCh := make(chan int, 16)
			var poison atomic.Value
			poison.Store("")
			pub.FailWith(func(m *outbox.Message) error {
				if m.MessageID != poison.Load().(string) {
					return nil
				}
				cur.Load().crashed.Store(true) // the process dies mid-publish
				crashes.Add(1)
				seenCh <- m.Attempt
				return errCrashed
			})
			// One message a batch: a crash counts an attempt of the crashing
			// message only, not of others that shared its batch.
			opts := []outbox.RelayOption{outbox.WithMaxAttempts(maxAttempts), outbox.WithOrdering(true, outbox.DeadSkips),
				outbox.WithBatchSize(1)}
			// A first pair creates the slot; the messages are written after.
			r := start(t, e.source(), pub, opts...)
			waitStreaming(t, r.src)
			r.stop()
			poison.Store(e.write(1, 1, "p")[0])
			others := e.write(10, 2, "a")

			for round := 1; round <= maxAttempts+1; round++ {
				c := &crashable{Source: e.source(pgcdc.WithTableAttempts(tc.inTable))}
				cur.Store(c)
				r := startOn(t, c.Source, c, pub, opts...)
				if tc.inTable && round > maxAttempts {
					// Attempt maxAttempts+1 is claimed: the relay kills the
					// message before publishing it.
					testsvc.Eventually(t, 20*time.Second, func() bool { return e.statusCounts()[2] > 0 },
						"round %d: the crashing message is not dead (attempts published %v)", round, seen)
					r.stop()
					break
				}
				testsvc.Eventually(t, 20*time.Second, func() bool { return crashes.Load() == int32(round) },
					"round %d: the crashing message was not published", round)
				r.stop()
				seen = append(seen, <-seenCh)
			}
			if !tc.inTable {
				for _, a := range seen {
					require.Equal(t, 1, a, "in memory, every new relay starts at attempt 1: %v", seen)
				}
				require.Zero(t, e.statusCounts()[2], "nothing goes dead with attempts in memory")
				return
			}
			require.Equal(t, []int{1, 2, 3}, seen, "the attempts of the crashed publishes")
			require.Equal(t, int32(maxAttempts), crashes.Load(), "published again after max attempts")
			var attempts int
			var reason string
			require.NoError(t, e.pool.QueryRow(context.Background(),
				"SELECT retry_count, last_error FROM "+e.table+" WHERE status = 2 AND message_id = $1", poison.Load()).
				Scan(&attempts, &reason))
			require.Equal(t, maxAttempts+1, attempts)
			require.Equal(t, 1, e.statusCounts()[2], "only the crashing message is dead")
			require.Contains(t, reason, "attempts exhausted")
			// The rest flows once it is dead, each sent row marked sent.
			start(t, e.source(), pub, opts...)
			waitAll(t, pub, others)
			testsvc.Eventually(t, 10*time.Second, func() bool { return e.statusCounts()[1] == len(others) },
				"rows not all sent: %v", e.statusCounts())
		})
	}
}

// TestMarkCountsHeldBackMessages pins the first cost of the handed-out mark
// (docs/cdc.md): a message at or below the mark that the earlier reader
// never handed out, because it was held back behind its aggregate's
// retried head, counts as handed out once when a new reader first claims
// it, so it is published at attempt 2, never more. A message after the mark
// starts at attempt 1.
func TestMarkCountsHeldBackMessages(t *testing.T) {
	t.Parallel()
	e := setup(t, false)
	pub := outboxtest.NewPublisher()
	var head atomic.Value
	head.Store("")
	var fails atomic.Int32
	pub.FailWith(func(m *outbox.Message) error {
		if m.MessageID == head.Load().(string) {
			fails.Add(1)
			return errors.New("consumer not ready") // a retry: it holds its aggregate
		}
		return nil
	})
	opts := []outbox.RelayOption{outbox.WithMaxAttempts(1000), outbox.WithOrdering(true, outbox.DeadBlocks),
		outbox.WithBatchSize(10)}
	r := start(t, e.source(), pub, opts...) // creates the slot; the messages come after
	waitStreaming(t, r.src)
	r.stop()
	head.Store(e.write(1, 1, "h")[0])
	held := e.write(1, 1, "h")[0] // behind the head: never handed out by the first reader
	before := e.write(5, 1, "a")  // after it in the log, handed out: the mark passes held

	r = start(t, e.source(), pub, opts...)
	waitAll(t, pub, before)
	testsvc.Eventually(t, 10*time.Second, func() bool { return fails.Load() >= 2 }, "the head was not retried")
	r.stop()
	for _, m := range pub.Messages() {
		require.NotEqual(t, held, m.MessageID, "the held-back message was published behind a failing head")
	}

	head.Store("") // the consumer is ready
	after := e.write(3, 1, "b")
	start(t, e.source(), pub, opts...)
	waitAll(t, pub, append([]string{held}, after...))
	attempt := map[string]int{}
	for _, m := range pub.Messages() {
		if _, ok := attempt[m.MessageID]; !ok {
			attempt[m.MessageID] = m.Attempt
		}
	}
	require.Equal(t, 2, attempt[held], "below the mark, a first claim counts as the second attempt, once")
	for _, id := range after {
		require.Equal(t, 1, attempt[id], "after the mark, a first claim is attempt 1")
	}
}
