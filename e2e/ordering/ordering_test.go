package ordering_test

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
)

var errTransient = errors.New("broker busy, try again")

// retryFaults fails the first attempt of about a quarter of the messages and
// the second attempt of a tenth of those, and freezes the relay past its
// lease on a few first attempts (when freeze > 0).
func retryFaults(freeze time.Duration) func(*outbox.Message, body) fault {
	return func(m *outbox.Message, _ body) fault {
		switch {
		case m.Attempt == 1 && freeze > 0 && chance(m, "freeze") < 2:
			return fault{freeze: freeze}
		case m.Attempt == 1 && chance(m, "fail") < 25, m.Attempt == 2 && chance(m, "fail") < 10:
			return fault{err: errTransient}
		}
		return fault{}
	}
}

// TestOrderAcrossRelaysAndRetries runs four relays on one table while a
// quarter of the first attempts fail (retried with backoff) and a few relays
// freeze past their lease in the middle of a publish, with producers still
// writing. With ordering on, the first copy of every message k+1 of an
// aggregate reaches the broker only after message k was confirmed; the only
// copies out of order are late duplicates from frozen relays, of messages the
// broker already had. With ordering off, the same faults reorder aggregates
// (the control that shows the check can fail). Two shapes: many aggregates
// with short backlogs, and fewer aggregates than the batch size with backlogs
// deeper than an ordered claim's window, where claims come back short while
// other relays hold heads and the stores switch to finding heads aggregate by
// aggregate (docs/ordering.md, "Per claim").
func TestOrderAcrossRelaysAndRetries(t *testing.T) {
	t.Parallel()
	type shape struct {
		name         string
		aggs, perAgg int
		control      bool // also run with ordering off
	}
	for _, sh := range []shape{{"ManyAggregates", 30, 12, true}, {"FewAggregates", 8, 60, false}} {
		aggs, perAgg := sh.aggs, sh.perAgg
		for _, db := range backends {
			for _, ordered := range []bool{true, false} {
				if !ordered && !sh.control {
					continue
				}
				name := sh.name + "/" + db.name + map[bool]string{true: "/Ordered", false: "/UnorderedControl"}[ordered]
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					be := db.new(t)
					msgs := interleaved(aggs, aggs*perAgg)
					half := len(msgs) / 2
					be.writeAll(t, msgs[:half], 10)

					freeze := time.Duration(0)
					if ordered {
						freeze = 700 * time.Millisecond // past the lease: another relay takes the batch over
					}
					br := newBroker(t, retryFaults(freeze))
					relays(t, be, 4, br, outbox.WithOrdering(ordered, outbox.DeadBlocks), outbox.WithBatchSize(16),
						outbox.WithBackoff(5*time.Millisecond, 40*time.Millisecond), outbox.WithMaxAttempts(10),
						outbox.WithPublishTimeout(200*time.Millisecond), outbox.WithLease(500*time.Millisecond))
					be.writeAll(t, msgs[half:], 10) // producers keep writing while the relays run

					testsvc.Eventually(t, 60*time.Second, func() bool { return br.distinct() == len(msgs) },
						"every message delivered (%d of %d so far)", br.distinct(), len(msgs))
					testsvc.Eventually(t, 20*time.Second, func() bool {
						return be.mustCount(t, "status = 1") == int64(len(msgs))
					}, "every row acknowledged")
					st := br.stats()
					t.Logf("%s: %d deliveries of %d messages, %d failed attempts, %d freezes, %d stale duplicates, %d violations",
						name, st.Deliveries, len(msgs), st.Failed, st.Frozen, st.Stale, len(st.Violations))
					require.NotZero(t, st.Failed, "faults were injected")
					require.Zero(t, be.mustCount(t, "status = 2"), "nothing went dead")

					if !ordered {
						require.NotEmpty(t, st.Violations, "without ordering, retries reorder aggregates")
						return
					}
					require.Empty(t, st.Violations)
					for a := range aggs {
						agg := fmt.Sprintf("agg-%d", a)
						want := make([]int, perAgg)
						for i := range want {
							want[i] = i
						}
						require.Equal(t, want, br.firstOrder(agg), "first copies of %s in order", agg)
					}
					if st.Frozen > 0 {
						require.Greater(t, st.Deliveries, len(msgs), "a frozen relay's batch is delivered twice")
					}
				})
			}
		}
	}
}

// TestDeadPolicy makes the second message of one aggregate fail every time,
// with several relays running: DeadBlocks holds the aggregate's later
// messages (while its head is retried with backoff, and after it went dead)
// until an operator retries the dead message, then delivers the rest in
// order; DeadSkips lets them flow past the gap. Every other aggregate flows
// in order throughout.
func TestDeadPolicy(t *testing.T) {
	t.Parallel()
	const aggs, perAgg = 12, 5
	const poison = "agg-0"
	cases := []struct {
		name   string
		policy outbox.DeadPolicy
		err    error // how message #1 of the poison aggregate fails
	}{
		{"BlocksAfterRetries", outbox.DeadBlocks, errTransient},
		{"BlocksPermanent", outbox.DeadBlocks, outbox.Permanent(errors.New("schema rejected"))},
		{"SkipsAfterRetries", outbox.DeadSkips, errTransient},
	}
	for _, db := range backends {
		for _, tc := range cases {
			t.Run(db.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				be := db.new(t)
				ctx := context.Background()
				msgs := interleaved(aggs, aggs*perAgg)
				be.writeAll(t, msgs, 6)

				failing := true
				var brk *broker
				brk = newBroker(t, func(m *outbox.Message, bd body) fault {
					brk.mu.Lock()
					defer brk.mu.Unlock()
					if failing && bd.Agg == poison && bd.Seq == 1 {
						return fault{err: tc.err}
					}
					return fault{}
				})
				opts := []outbox.RelayOption{outbox.WithOrdering(true, tc.policy), outbox.WithBatchSize(8),
					outbox.WithBackoff(20*time.Millisecond, 50*time.Millisecond), outbox.WithMaxAttempts(3)}
				brk.dead = func(agg string, seq int) bool {
					id := msgs[seq*aggs+agg0(agg)].MessageID // interleaved: message seq of agg-a is at seq*aggs + a
					n, err := be.count(context.Background(), "status = 2 AND message_id = '"+id+"'")
					if err != nil {
						t.Errorf("is %s #%d dead: %v", agg, seq, err) // on a relay goroutine: no FailNow
					}
					return n == 1
				}
				stop := relays(t, be, 3, brk, opts...)

				others := (aggs - 1) * perAgg
				wantPoison := []int{0} // DeadBlocks: the head, then nothing until an operator acts
				if tc.policy == outbox.DeadSkips {
					wantPoison = []int{0, 2, 3, 4} // a gap where #1 died
				}
				testsvc.Eventually(t, 30*time.Second, func() bool {
					return brk.distinct() == others+len(wantPoison) && be.mustCount(t, "status = 2") == 1
				}, "the other aggregates delivered and the poison message dead")
				stop()
				var wantSkips []string // DeadSkips: #2 goes out once #1 is dead, never while #1 could still be sent
				if tc.policy == outbox.DeadSkips {
					wantSkips = []string{poison + " #2 went past dead #1"}
				}
				require.Empty(t, brk.stats().Violations)
				require.Equal(t, wantSkips, brk.stats().Skips)
				require.Equal(t, wantPoison, brk.firstOrder(poison))
				for a := 1; a < aggs; a++ {
					require.Equal(t, []int{0, 1, 2, 3, 4}, brk.firstOrder(fmt.Sprintf("agg-%d", a)))
				}

				// No relay can claim anything more: the blocked rows stay pending.
				r, err := outbox.NewRelay(be.store, brk, opts...)
				require.NoError(t, err)
				ev, err := r.Step(ctx)
				require.NoError(t, err)
				require.Zero(t, ev.Claimed, "nothing left that may be published")
				if tc.policy == outbox.DeadSkips {
					require.Zero(t, be.mustCount(t, "status = 0"))
					return
				}
				require.EqualValues(t, perAgg-2, be.mustCount(t, "status = 0"), "the poison aggregate's later messages wait")

				// The operator fixes the consumer's schema and retries the dead message.
				brk.mu.Lock()
				failing = false
				brk.mu.Unlock()
				n, err := be.store.RetryDead(ctx, outbox.DeadFilter{AggregateID: poison})
				require.NoError(t, err)
				require.EqualValues(t, 1, n)
				relays(t, be, 3, brk, opts...)
				testsvc.Eventually(t, 20*time.Second, func() bool { return brk.distinct() == aggs*perAgg },
					"the poison aggregate resumes")
				require.Equal(t, []int{0, 1, 2, 3, 4}, brk.firstOrder(poison))
				require.Empty(t, brk.stats().Violations)
			})
		}
	}
}

// TestHotAggregateDoesNotStarveOthers writes a long backlog for one aggregate
// ahead of everyone else's messages: with ordering on, it drains one message
// per cycle, while the other aggregates, written after it, are not held
// behind it.
func TestHotAggregateDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	for _, db := range backends {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			be := db.new(t)
			var hot []*outbox.Message
			for i := range 300 {
				hot = append(hot, seqMsg("hot", i))
			}
			be.writeAll(t, hot, 100)
			be.writeAll(t, interleaved(50, 100), 20)

			br := newBroker(t, nil)
			relays(t, be, 2, br, outbox.WithOrdering(true, outbox.DeadBlocks), outbox.WithBatchSize(50))
			testsvc.Eventually(t, 30*time.Second, func() bool { return br.distinct() >= 100+1 && othersDone(br, 50) },
				"the other aggregates delivered")
			got := len(br.firstOrder("hot"))
			t.Logf("%s: when the 50 other aggregates were done, the hot one had %d of 300 out", db.name, got)
			require.Less(t, got, 300, "the others did not wait for the hot aggregate to drain")
			testsvc.Eventually(t, 60*time.Second, func() bool { return len(br.firstOrder("hot")) == 300 }, "hot drained")
			require.True(t, slices.IsSorted(br.firstOrder("hot")))
			require.Empty(t, br.stats().Violations)
		})
	}
}

// agg0 returns a of "agg-a".
func agg0(agg string) int {
	var a int
	if _, err := fmt.Sscanf(agg, "agg-%d", &a); err != nil {
		panic(err)
	}
	return a
}

func othersDone(br *broker, aggs int) bool {
	for a := range aggs {
		if len(br.firstOrder(fmt.Sprintf("agg-%d", a))) < 2 {
			return false
		}
	}
	return true
}

// TestRetryDeadWhileRelaysRun is an operator retrying dead messages while
// three relays drain, the dead rows blocking their aggregates: about one
// message in six is refused for good on its first attempt and dies, and an
// operator puts every dead message back every few milliseconds (RetryDead),
// so rows move between dead and pending while claims read them. Every
// message arrives, and no first copy overtakes its predecessor: a claim
// that missed a row in the middle of a retry would let the rows behind it
// out first.
func TestRetryDeadWhileRelaysRun(t *testing.T) {
	t.Parallel()
	const aggs, perAgg = 20, 30
	for _, db := range backends {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			be := db.new(t)
			be.writeAll(t, interleaved(aggs, aggs*perAgg), 6)
			refused := errors.New("refused once")
			var once sync.Map // message ids refused (a retried row counts its attempts from 1 again)
			br := newBroker(t, func(m *outbox.Message, _ body) fault {
				if chance(m, "refuse") < 16 {
					if _, again := once.LoadOrStore(m.MessageID, true); !again {
						return fault{err: outbox.Permanent(refused)}
					}
				}
				return fault{}
			})
			relays(t, be, 3, br, outbox.WithOrdering(true, outbox.DeadBlocks), outbox.WithBatchSize(8))

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var retried int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				for ctx.Err() == nil {
					n, err := be.store.RetryDead(ctx, outbox.DeadFilter{})
					if err != nil && ctx.Err() == nil {
						t.Errorf("retry dead: %v", err)
						return
					}
					retried += n
					time.Sleep(3 * time.Millisecond)
				}
			}()
			testsvc.Eventually(t, 60*time.Second, func() bool { return br.distinct() == aggs*perAgg },
				"every message delivered")
			cancel()
			<-done
			t.Logf("%s: %d dead messages retried, %d deliveries", db.name, retried, br.stats().Deliveries)
			require.Positive(t, retried, "no message died: the run did not test retries")
			require.Empty(t, br.stats().Violations)
		})
	}
}
