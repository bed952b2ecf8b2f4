package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
)

// wavePublisher is an outboxtest.Publisher that records each Publish call
// (a wave) as the row ids it carried and when it began, and may take a
// while at the broker: took, or longer for a call that carries a message
// of an aggregate in slow.
type wavePublisher struct {
	*outboxtest.Publisher
	took   time.Duration
	slow   map[string]time.Duration
	mu     sync.Mutex
	calls  [][]int64
	starts []time.Time
}

func (p *wavePublisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	ids := make([]int64, len(msgs))
	took := p.took
	for i, m := range msgs {
		ids[i] = m.RowID
		took = max(took, p.slow[m.AggregateID])
	}
	p.mu.Lock()
	p.calls = append(p.calls, ids)
	p.starts = append(p.starts, time.Now())
	p.mu.Unlock()
	time.Sleep(took)
	return p.Publisher.Publish(ctx, msgs)
}

// startOf returns when the call that carried row id began.
func (p *wavePublisher) startOf(t *testing.T, id int64) time.Time {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, ids := range p.calls {
		if slices.Contains(ids, id) {
			return p.starts[i]
		}
	}
	t.Fatalf("row %d was not published: %v", id, p.calls)
	return time.Time{}
}

func (p *wavePublisher) waves() [][]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]int64(nil), p.calls...)
}

// results records the result of each message the relay reports.
type results struct {
	mu   sync.Mutex
	by   map[int64]outbox.Result // the last result of each row
	held int                     // how many times a row was held back
}

func (h *results) OnMessage(ev outbox.MessageEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.by[ev.Message.RowID] = ev.Result
	if ev.Result == outbox.ResultHeldBack {
		h.held++
	}
}

func (h *results) get() map[int64]outbox.Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[int64]outbox.Result{}
	for k, v := range h.by {
		out[k] = v
	}
	return out
}

// TestRelayPublishesRunsInWaves drives one ordered cycle over a store that
// returns runs (rows 1..12 are a1 b1 c1 a2 b2 c2 a3 b3 c3 a4 b4 c4): wave i
// is the i-th message of every run still going, in one Publish call; a
// message that fails stops its run, and the rest of the run is given back
// without its attempt counted; the lease, checked before each wave, gives
// back what would not finish in time.
func TestRelayPublishesRunsInWaves(t *testing.T) {
	t.Parallel()
	busy := errors.New("broker busy")
	cases := []struct {
		name      string
		aggs      []string
		rows      int
		took      time.Duration // at the broker, per wave
		fail      func(*outbox.Message) error
		wantWaves [][]int64
		want      map[int64]outbox.Result // rows not listed: sent
		attempt   map[int64]int           // each row's attempt as the store keeps it after the cycle; not listed: 1
	}{
		{
			name: "OneMessagePerAggregateIsOneWave", aggs: []string{"a", "b", "c", "d"}, rows: 1,
			wantWaves: [][]int64{{1, 2, 3, 4}},
		},
		{
			name: "RunsGoOutInWaves", aggs: []string{"a", "b", "c"}, rows: 4,
			wantWaves: [][]int64{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}},
		},
		{
			// b2 (row 5) fails: b3 and b4 are held back, a and c go on.
			name: "FailureStopsItsRun", aggs: []string{"a", "b", "c"}, rows: 4,
			fail:      failRows(map[int64]error{5: busy}),
			wantWaves: [][]int64{{1, 2, 3}, {4, 5, 6}, {7, 9}, {10, 12}},
			want:      map[int64]outbox.Result{5: outbox.ResultRetry, 8: outbox.ResultHeldBack, 11: outbox.ResultHeldBack},
			attempt:   map[int64]int{8: 0, 11: 0},
		},
		{
			// a1 is refused for good: dead, and the rest of a is held back.
			name: "DeadStopsItsRun", aggs: []string{"a", "b"}, rows: 3,
			fail:      failRows(map[int64]error{1: outbox.Permanent(errors.New("too large"))}),
			wantWaves: [][]int64{{1, 2}, {4}, {6}},
			want:      map[int64]outbox.Result{1: outbox.ResultDead, 3: outbox.ResultHeldBack, 5: outbox.ResultHeldBack},
			attempt:   map[int64]int{3: 0, 5: 0},
		},
		{
			// The destination is down: the first wave fails as unavailable and
			// every run is given back, none of it counted.
			name: "DestinationDownGivesEveryRunBack", aggs: []string{"a", "b"}, rows: 2,
			fail:      func(*outbox.Message) error { return outbox.Unavailable(errors.New("connection refused")) },
			wantWaves: [][]int64{{1, 2}},
			want: map[int64]outbox.Result{1: outbox.ResultUnavailable, 2: outbox.ResultUnavailable,
				3: outbox.ResultHeldBack, 4: outbox.ResultHeldBack},
			attempt: map[int64]int{1: 0, 2: 0, 3: 0, 4: 0},
		},
		{
			// Lease 2 s, publish timeout 1 s: a wave may start until 1 s after
			// the claim. At 600 ms a wave, the third would start at 1.2 s.
			name: "LeaseLeavesNoTimeForTheNextWave", aggs: []string{"a", "b"}, rows: 4, took: ms(600),
			wantWaves: [][]int64{{1, 2}, {3, 4}},
			want: map[int64]outbox.Result{5: outbox.ResultHeldBack, 6: outbox.ResultHeldBack,
				7: outbox.ResultHeldBack, 8: outbox.ResultHeldBack},
			attempt: map[int64]int{5: 0, 6: 0, 7: 0, 8: 0},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				st := newHeadStore()
				st.runs = true
				st.add(tc.aggs, tc.rows)
				pub := &wavePublisher{Publisher: outboxtest.NewPublisher(), took: tc.took}
				if tc.fail != nil {
					pub.FailWith(tc.fail)
				}
				res := &results{by: map[int64]outbox.Result{}}
				r, err := outbox.NewRelay(st, pub, outbox.WithBatchSize(100), outbox.WithOrdering(true, outbox.DeadBlocks),
					outbox.WithLease(2*time.Second), outbox.WithPublishTimeout(time.Second), outbox.WithHooks(res))
				require.NoError(t, err)
				_, _ = r.Step(t.Context())

				require.Equal(t, tc.wantWaves, pub.waves())
				got := res.get()
				for id := int64(1); id <= int64(len(tc.aggs)*tc.rows); id++ {
					want, ok := tc.want[id]
					if !ok {
						want = outbox.ResultSent
					}
					require.Equal(t, want, got[id], "row %d", id)
					attempt, ok := tc.attempt[id]
					if !ok {
						attempt = 1
					}
					require.Equal(t, attempt, st.row(id).m.Attempt, "row %d's attempt", id)
				}
				requireAggregateOrder(t, pub.Messages())
			})
		})
	}
}

// TestRelayWavesKeepOrderAcrossRetries runs an ordered relay over a store
// that returns runs while a third of first attempts fail: every message
// arrives, and each aggregate's first copies arrive in order.
func TestRelayWavesKeepOrderAcrossRetries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newHeadStore()
		st.runs = true
		aggs := []string{"a", "b", "c", "d", "e"}
		st.add(aggs, 20)
		pub := &wavePublisher{Publisher: outboxtest.NewPublisher(), took: ms(2)}
		pub.FailWith(func(m *outbox.Message) error {
			if m.Attempt == 1 && m.RowID%3 == 0 {
				return errors.New("broker busy")
			}
			return nil
		})
		r, err := outbox.NewRelay(st, pub, outbox.WithBatchSize(30), outbox.WithOrdering(true, outbox.DeadBlocks),
			outbox.WithBackoff(50*time.Millisecond, 50*time.Millisecond), outbox.WithMinPollInterval(10*time.Millisecond),
			outbox.WithPollInterval(100*time.Millisecond))
		require.NoError(t, err)
		runFor(t, r, 10*time.Second, nil)
		require.Len(t, pub.Messages(), len(aggs)*20, "every message once")
		requireAggregateOrder(t, pub.Messages())
	})
}

// failRows fails the rows of errs, on every attempt.
func failRows(errs map[int64]error) func(*outbox.Message) error {
	return func(m *outbox.Message) error { return errs[m.RowID] }
}

// requireAggregateOrder checks that within each aggregate the messages
// arrived in row order (a duplicate of an earlier one aside).
func requireAggregateOrder(t *testing.T, msgs []*outbox.Message) {
	t.Helper()
	last := map[string]int64{}
	for _, m := range msgs {
		require.Greater(t, m.RowID, last[m.AggregateID], fmt.Sprintf("aggregate %s: row %d after row %d", m.AggregateID, m.RowID, last[m.AggregateID]))
		last[m.AggregateID] = m.RowID
	}
}

// TestRelayChainsRunsAcrossBatches runs an ordered relay with three batches
// in flight over a store that returns chained runs: a batch may hold the
// rows that follow those of an earlier batch still at the broker, and
// publishes them only once the earlier ones are confirmed. It checks that
// batches did overlap, that every message arrived once, in order per
// aggregate, and that when a message of the first batch fails, the later
// batches' rows of its aggregate are given back, not published ahead of it.
func TestRelayChainsRunsAcrossBatches(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		fail func(*outbox.Message) error
	}{
		{name: "AllGoThrough"},
		{name: "FailureInAnEarlierBatch", fail: func(m *outbox.Message) error {
			if m.RowID == 3 && m.Attempt == 1 { // a's second message, in the first batch
				return errors.New("broker busy")
			}
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				st := newHeadStore()
				st.runs = true
				st.add([]string{"a", "b"}, 12) // rows 1..24: a the odd ones, b the even ones
				pub := &wavePublisher{Publisher: outboxtest.NewPublisher(), took: ms(5)}
				if tc.fail != nil {
					pub.FailWith(tc.fail)
				}
				res := &results{by: map[int64]outbox.Result{}}
				r, err := outbox.NewRelay(st, pub, outbox.WithBatchSize(4), outbox.WithMaxInFlight(3),
					outbox.WithOrdering(true, outbox.DeadBlocks), outbox.WithBackoff(ms(50), ms(50)),
					outbox.WithMinPollInterval(ms(10)), outbox.WithPollInterval(ms(100)), outbox.WithHooks(res))
				require.NoError(t, err)
				runFor(t, r, 5*time.Second, nil)

				require.Len(t, pub.Messages(), 24, "every message once")
				requireAggregateOrder(t, pub.Messages())
				overlapped := false
				for _, c := range st.history()[1:2] {
					overlapped = c.at == 0 && c.rows > 0
				}
				require.True(t, overlapped, "the second batch was claimed while the first was at the broker: %v", st.history())
				if tc.fail != nil {
					res.mu.Lock()
					held := res.held
					res.mu.Unlock()
					require.Positive(t, held, "rows after the failed one were given back")
				}
			})
		})
	}
}

// TestRelayChainedRunStartsWhenItsOwnRunIsDone: a chained run waits for the
// run of its aggregate in the earlier batch, not for that whole batch. The
// first batch is a0 b0 b1 b2 (waves {a0 b0}, {b1}, {b2}, 5 ms each at the
// broker); the second, claimed while it is in flight, is a1 a2 a3, chained
// after a0. a1 goes out once a0 is confirmed, beside b1, not after b2.
func TestRelayChainedRunStartsWhenItsOwnRunIsDone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newHeadStore()
		st.runs = true
		st.add([]string{"a"}, 1) // row 1
		st.add([]string{"b"}, 3) // rows 2-4
		st.add([]string{"a"}, 3) // rows 5-7
		pub := &wavePublisher{Publisher: outboxtest.NewPublisher(), took: ms(5)}
		runTwoBatches(t, st, pub, 7)
		at := map[int64]int{} // row -> index of the Publish call that carried it
		for i, ids := range pub.waves() {
			for _, id := range ids {
				at[id] = i
			}
		}
		require.Less(t, at[5], at[4], "a1 waited for b's waves: %v", pub.waves())
	})
}

// TestRelayRunGoesWhileAnotherWaveIsAtTheBroker: waves are not in lockstep.
// The first batch is a0 x0 x1 x2 (waves {a0 x0}, {x1}, {x2}, 5 ms each); the
// second, claimed while it is in flight, is a1 (chained after a0) and
// c0 c1 c2, whose calls take 20 ms. c0 goes out at once; a1 goes out when a0
// is confirmed (5 ms), while c0 is still at the broker, not with c1 when c0
// returns (20 ms).
func TestRelayRunGoesWhileAnotherWaveIsAtTheBroker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newHeadStore()
		st.runs = true
		st.add([]string{"a"}, 1) // row 1
		st.add([]string{"x"}, 3) // rows 2-4
		st.add([]string{"a"}, 1) // row 5
		st.add([]string{"c"}, 3) // rows 6-8
		pub := &wavePublisher{Publisher: outboxtest.NewPublisher(), took: ms(5), slow: map[string]time.Duration{"c": ms(20)}}
		runTwoBatches(t, st, pub, 8)
		require.Less(t, pub.startOf(t, 5), pub.startOf(t, 7), "a1 waited for c0 to return: %v", pub.waves())
		require.False(t, pub.startOf(t, 5).Before(pub.startOf(t, 1).Add(ms(5))), "a1 went out before a0 was confirmed")
	})
}

// runTwoBatches runs an ordered relay with batches of 4, two in flight,
// over st for a second, and checks that the n messages arrived once each,
// in order per aggregate.
func runTwoBatches(t *testing.T, st *headStore, pub *wavePublisher, n int) {
	t.Helper()
	r, err := outbox.NewRelay(st, pub, outbox.WithBatchSize(4), outbox.WithMaxInFlight(2),
		outbox.WithOrdering(true, outbox.DeadBlocks), outbox.WithMinPollInterval(ms(10)),
		outbox.WithPollInterval(ms(100)))
	require.NoError(t, err)
	runFor(t, r, time.Second, nil)
	require.Len(t, pub.Messages(), n, "every message once")
	requireAggregateOrder(t, pub.Messages())
}
