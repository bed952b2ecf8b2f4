package pgcdc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgcdc"
)

// rowModes are the two ways rows live in the table: kept and settled
// behind the stream, or deleted by the writer in the same transaction.
var rowModes = []struct {
	name    string
	deleted bool
}{
	{"KeptRows", false},
	{"DeletedRows", true},
}

func TestStreamsCommittedInsertsInCommitOrder(t *testing.T) {
	t.Parallel()
	for _, mode := range rowModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, mode.deleted)
			pub := outboxtest.NewPublisher()
			r := start(t, e.source(), pub)
			waitStreaming(t, r.src)

			var ids []string
			var rolled []string
			for i := range 10 {
				ids = append(ids, e.write(7, 1+i%3, "a")...)
				rolled = append(rolled, e.rollback())
			}
			waitAll(t, pub, ids)
			require.True(t, inOrder(pub, ids), "published out of commit order")
			seen := firstSeen(pub)
			for _, id := range rolled {
				require.NotContains(t, seen, id, "a rolled-back message was published")
			}
			require.Empty(t, pub.Duplicates())
			if mode.deleted {
				require.Empty(t, e.statusCounts(), "the writer deletes its rows")
			} else {
				testsvc.Eventually(t, 10*time.Second, func() bool { return e.statusCounts()[1] == len(ids) },
					"kept rows not all marked sent: %v", e.statusCounts())
			}
			// The slot is confirmed past what was settled.
			testsvc.Eventually(t, 10*time.Second, func() bool { return r.src.Confirmed() > 0 }, "nothing confirmed")
		})
	}
}

// TestKillResumesFromTheSlot kills the source and its relay at points of a
// drain and starts new ones on the slot: nothing committed is lost, and
// copies come only from what was settled after the last confirmation.
func TestKillResumesFromTheSlot(t *testing.T) {
	t.Parallel()
	for _, mode := range rowModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, mode.deleted)
			pub := outboxtest.NewPublisher()
			// A slow broker, so that the stream reads ahead of it and the
			// window is full when the kill comes.
			pub.FailWith(func(*outbox.Message) error { time.Sleep(time.Millisecond); return nil })
			const window = 50
			r := start(t, e.source(pgcdc.WithMaxWindow(window)), pub, outbox.WithBatchSize(10))
			waitStreaming(t, r.src)
			r.stop()

			const n = 600
			ids := e.write(n, 3, "a")
			kills := 0
			for _, at := range []int{n / 4, n / 2, 3 * n / 4} {
				r := start(t, e.source(pgcdc.WithMaxWindow(window)), pub, outbox.WithBatchSize(10))
				testsvc.Eventually(t, 30*time.Second, func() bool { return len(firstSeen(pub)) >= at }, "stalled before %d", at)
				r.stop() // mid-stream: the last settled messages are not confirmed
				kills++
			}
			start(t, e.source(pgcdc.WithMaxWindow(window)), pub, outbox.WithBatchSize(10))
			waitAll(t, pub, ids)
			require.True(t, inOrder(pub, ids), "first copies out of commit order")
			dups := 0
			for _, c := range pub.Duplicates() {
				dups += c - 1
			}
			// Per kill, at most what one status interval settled plus the window.
			t.Logf("%d kills, %d duplicates of %d messages", kills, dups, n)
			require.LessOrEqual(t, dups, kills*(window+200))
		})
	}
}

func TestPoisonMessageGoesDeadWithoutBlocking(t *testing.T) {
	t.Parallel()
	for _, mode := range rowModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, mode.deleted)
			pub := outboxtest.NewPublisher()
			r := start(t, e.source(), pub, outbox.WithMaxAttempts(3), outbox.WithOrdering(true, outbox.DeadSkips))
			waitStreaming(t, r.src)

			// Armed before the write, by aggregate: the stream may publish
			// a message before write returns its id.
			pub.FailWith(func(m *outbox.Message) error {
				if m.AggregateID == "p" {
					return errors.New("refused")
				}
				return nil
			})
			poison := e.write(1, 1, "p")[0]
			ids := e.write(20, 2, "a")
			waitAll(t, pub, ids)
			require.NotContains(t, firstSeen(pub), poison)
			testsvc.Eventually(t, 10*time.Second, func() bool { return e.statusCounts()[2] == 1 },
				"the poison message is not recorded dead: %v", e.statusCounts())
			var id string
			require.NoError(t, e.pool.QueryRow(context.Background(), "SELECT message_id FROM "+e.table+" WHERE status = 2").Scan(&id))
			require.Equal(t, poison, id)
			// The dead row the source inserted (deleted rows) is not streamed back.
			after := e.write(3, 1, "b")
			waitAll(t, pub, after)
			require.Equal(t, 1, e.statusCounts()[2])
		})
	}
}

// TestRetryHoldsItsAggregate: with ordering, a message waiting for a retry
// holds back its aggregate's later messages and nothing else.
func TestRetryHoldsItsAggregate(t *testing.T) {
	t.Parallel()
	e := setup(t, false)
	pub := outboxtest.NewPublisher()
	r := start(t, e.source(), pub, outbox.WithOrdering(true, outbox.DeadSkips), outbox.WithMaxInFlight(4))
	waitStreaming(t, r.src)

	// Armed before the write, on the first message of x that reaches the
	// broker (the stream may publish it before write returns its id); with
	// ordering that is the first one written, which inOrder checks below.
	var fails atomic.Int32
	var mu sync.Mutex
	var head string
	pub.FailWith(func(m *outbox.Message) error {
		if m.AggregateID != "x" {
			return nil
		}
		mu.Lock()
		if head == "" {
			head = m.MessageID
		}
		isHead := m.MessageID == head
		mu.Unlock()
		if isHead && fails.Add(1) <= 2 {
			return errors.New("try again")
		}
		return nil
	})
	first := e.write(1, 1, "x")[0]
	later := e.write(3, 1, "x")
	others := e.write(5, 1, "y")
	waitAll(t, pub, append(append([]string{first}, later...), others...))
	require.True(t, inOrder(pub, append([]string{first}, later...)), "aggregate x out of order")
	require.GreaterOrEqual(t, fails.Load(), int32(3))
}

func TestBrokerDownPausesTheStream(t *testing.T) {
	t.Parallel()
	for _, mode := range rowModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, mode.deleted)
			pub := outboxtest.NewPublisher()
			pub.FailWith(func(*outbox.Message) error { return outbox.Unavailable(errors.New("broker down")) })
			r := start(t, e.source(), pub, outbox.WithMaxAttempts(2), outbox.WithMaxInFlight(4),
				outbox.WithBatchSizeRange(2, 10), outbox.WithOrdering(true, outbox.DeadBlocks))
			waitStreaming(t, r.src)

			ids := e.write(30, 3, "a")
			ids = append(ids, e.write(30, 3, "b")...)
			time.Sleep(time.Second) // the outage lasts a while; attempts are not spent
			require.Zero(t, pub.Count())
			require.Zero(t, e.statusCounts()[2], "nothing may go dead while the broker is down")
			pub.FailWith(nil)
			waitAll(t, pub, ids)
			if !mode.deleted {
				testsvc.Eventually(t, 10*time.Second, func() bool { return e.statusCounts()[1] == len(ids) },
					"kept rows not all marked sent: %v", e.statusCounts())
			}
		})
	}
}

// TestSlotDroppedFailsOverToPolling drops the slot under a running relay:
// the source creates it again, polls the rows written meanwhile, and
// streams again, losing nothing.
func TestSlotDroppedFailsOverToPolling(t *testing.T) {
	t.Parallel()
	e := setup(t, false)
	pub := outboxtest.NewPublisher()
	r := start(t, e.source(), pub)
	waitStreaming(t, r.src)
	before := e.write(20, 2, "a")
	waitAll(t, pub, before)

	require.NoError(t, testsvc.DropReplicationSlot(e.slot, "no_such_publication"))
	during := e.write(20, 2, "b") // in no slot: only the table has them
	waitAll(t, pub, during)
	waitStreaming(t, r.src)
	after := e.write(20, 2, "c")
	waitAll(t, pub, after)
	require.GreaterOrEqual(t, r.src.Switches(), int64(2), "to polling and back")
	testsvc.Eventually(t, 10*time.Second, func() bool { return e.statusCounts()[1] == 60 },
		"rows not all sent: %v", e.statusCounts())
}

// TestRefusedReplicationPollsAtOnce: without the slot (and not allowed to
// create it), the source polls the table, then streams once the slot exists.
func TestRefusedReplicationPollsAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, false)
	pub := outboxtest.NewPublisher()
	r := start(t, e.source(pgcdc.WithCreateSlot(false)), pub)
	ids := e.write(10, 1, "a")
	waitAll(t, pub, ids)
	require.Equal(t, pgcdc.ModePolling, r.src.Mode())

	// An operator runs the setup (what outbox migrate --cdc does).
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, "CREATE PUBLICATION "+e.pub+" FOR TABLE "+e.table+" WITH (publish = 'insert')")
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", e.slot)
	require.NoError(t, err)
	waitStreaming(t, r.src)
	more := e.write(10, 1, "b")
	waitAll(t, pub, more)
	require.Empty(t, pub.Duplicates())
}

// TestStandbyTakesOver runs two sources on one slot: the second stands by
// and streams within seconds of the first one's death.
func TestStandbyTakesOver(t *testing.T) {
	t.Parallel()
	e := setup(t, true)
	pub := outboxtest.NewPublisher()
	first := start(t, e.source(), pub)
	waitStreaming(t, first.src)
	second := start(t, e.source(), pub)
	testsvc.Eventually(t, 10*time.Second, func() bool { return second.src.Mode() == pgcdc.ModeStandby },
		"the second source does not stand by")
	ids := e.write(10, 1, "a")
	waitAll(t, pub, ids)

	first.stop()
	took := waitStreaming(t, second.src)
	t.Logf("standby took over %v after the first source stopped", took)
	require.Less(t, took, 5*time.Second)
	more := e.write(10, 1, "b")
	waitAll(t, pub, more)
}

// TestConcurrentWritersKeptRowsAllSent: with many writers committing at
// once, the server sends some commits a moment before other sessions can
// see them; their rows must still be marked sent, not left pending.
func TestConcurrentWritersKeptRowsAllSent(t *testing.T) {
	t.Parallel()
	e := setup(t, false)
	pub := outboxtest.NewPublisher()
	r := start(t, e.source(), pub, outbox.WithMaxInFlight(4))
	waitStreaming(t, r.src)

	const writers, each = 16, 40
	var wg sync.WaitGroup
	ids := make([][]string, writers)
	for w := range writers {
		wg.Go(func() { ids[w] = e.write(each, 1, fmt.Sprintf("w%d", w)) })
	}
	wg.Wait()
	var all []string
	for _, w := range ids {
		all = append(all, w...)
	}
	waitAll(t, pub, all)
	testsvc.Eventually(t, 10*time.Second, func() bool { return e.statusCounts()[1] == writers*each },
		"rows left pending after they were sent: %v", e.statusCounts())
}
