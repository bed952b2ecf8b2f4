package outbox

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// Waves: how an ordered relay publishes a batch that holds several messages
// of one aggregate.
//
// An ordered claim returns, for each aggregate, a run: a prefix of its
// pending rows in id order (see ClaimParams.Ordered). The relay publishes
// the batch in waves: a wave is one Publish call with the next message of
// every run that may go on, and a run may go on once the broker confirmed
// its previous message. A run has one message at the broker at a time, but
// waves overlap: a run whose previous message was confirmed goes in a new
// wave at once, while other runs' waves are still at the broker. So message
// k+1 of an aggregate goes to the broker only after the broker confirmed
// message k, and waits for nothing else. A message that fails (to be retried, or dead)
// stops its run: the rest of the run is not published and is given back
// (refunded: due now, the attempt not counted); the store keeps it blocked
// behind the failed row, which is still pending. A batch whose runs are all
// one message long (one message per aggregate) is one wave, one Publish
// call, as without ordering.
//
// Before each wave the relay checks its lease by its own clock: the wave
// must be able to finish (the publish timeout) before the lease, counted
// from the start of the claim, runs out; otherwise the rest of the batch is
// given back. A stop of the relay (Run's ctx cancelled) also gives back
// what is not yet published, so that a stop waits for one wave at most.
//
// Chained runs: with several batches in flight, the relay names the rows
// of its batches in flight in each claim (ClaimParams.Chain), and a store
// may then return the rows that follow them. Such a run waits for the run
// of its aggregate in the earlier batch: it starts once the broker
// confirmed every message of that run (not of the whole earlier batch: a
// run is done as soon as its own last message is), and is given back whole
// when one of them failed. So the relay publishes message k+1 only after
// it got a copy of message k confirmed, whichever batch each is in.

// errHeldBack marks, in a batch's results, a message that was not
// published: an earlier message of its aggregate (in the batch, or in the
// earlier batch it follows) failed, the lease left no time for its wave, or
// the relay is stopping.
var errHeldBack = errors.New("outbox: not published: held back behind an earlier message of its aggregate")

// aggregateKey identifies an aggregate.
type aggregateKey struct{ typ, id string }

func keyOf(m *Message) aggregateKey { return aggregateKey{m.AggregateType, m.AggregateID} }

// runsOf groups the indexes of send (in id order) into runs, one per
// aggregate, each in id order, the runs in the order of their first row.
func runsOf(send []*Message) [][]int {
	at := make(map[aggregateKey]int, len(send))
	var runs [][]int
	for i, m := range send {
		k := keyOf(m)
		j, ok := at[k]
		if !ok {
			j = len(runs)
			at[k] = j
			runs = append(runs, nil)
		}
		runs[j] = append(runs[j], i)
	}
	return runs
}

// runDone is the end of one aggregate's run in one batch: done is closed
// once every message of the run has its result, ok set before that when
// the broker confirmed them all.
type runDone struct {
	done  chan struct{}
	ok    bool
	first int64 // the run's first row id
}

// chain is, with ordering, the runs of the batches a relay has in flight,
// by aggregate, so that a later batch's run can wait for the earlier ones
// (chained runs: the store may hand out rows that follow rows this relay
// holds, see ClaimParams.Chain). Only the claim loop uses it.
type chain struct {
	runs    map[aggregateKey][]*runDone
	batches map[*batch]struct{}
}

// ids returns the rows of the batches in flight, for ClaimParams.Chain.
func (c *chain) ids() []int64 {
	var ids []int64
	for b := range c.batches {
		for _, m := range b.send {
			ids = append(ids, m.RowID)
		}
	}
	return ids
}

// add records b, just claimed with the ids of the batches in flight in
// Chain, before it is published. Every row of an aggregate that lies before
// a row of b's run and was pending when b was claimed is in b or in Chain
// (the claim's rule), so it belongs to b's run or to the run of an earlier
// batch in flight that starts before b's run ends. b's run waits for all of
// those before its first message: then every such row was confirmed before
// any row after it goes out, even when the run has rows of Chain in its
// middle (a claim in two parts can return one, see pgstore's claim cursor).
// A run that re-takes rows an earlier batch gave back waits for that batch
// too, and is given back if it failed, until the earlier batch is settled
// and leaves the chain.
func (c *chain) add(b *batch) {
	if c.runs == nil {
		c.runs, c.batches = map[aggregateKey][]*runDone{}, map[*batch]struct{}{}
	}
	b.runs, b.after = map[aggregateKey]*runDone{}, map[aggregateKey][]*runDone{}
	last := map[aggregateKey]int64{}
	for _, m := range b.send { // in id order
		last[keyOf(m)] = m.RowID
	}
	for _, m := range b.send {
		k := keyOf(m)
		if _, ok := b.runs[k]; ok {
			continue
		}
		for _, prev := range c.runs[k] {
			if prev.first < last[k] {
				b.after[k] = append(b.after[k], prev)
			}
		}
		rd := &runDone{done: make(chan struct{}), first: m.RowID}
		b.runs[k] = rd
		c.runs[k] = append(c.runs[k], rd)
	}
	c.batches[b] = struct{}{}
}

// remove forgets b once it is settled.
func (c *chain) remove(b *batch) {
	if b == nil || c.batches == nil {
		return
	}
	delete(c.batches, b)
	for k, rd := range b.runs {
		c.runs[k] = slices.DeleteFunc(c.runs[k], func(x *runDone) bool { return x == rd })
		if len(c.runs[k]) == 0 {
			delete(c.runs, k)
		}
	}
}

// publishWaves publishes b.send in waves (see above) and sets b.errs, in
// which a message not published carries errHeldBack. A run that follows
// the run of its aggregate in an earlier batch (b.after) starts once that
// one is done, and only when it went through. ctx is Run's, which a stop
// cancels; bctx is the batch's (see batchContext). Waves do not go in
// lockstep: a run that may go on does not wait for other runs' waves.
func (r *Relay) publishWaves(ctx, bctx context.Context, b *batch) {
	w := newWaves(b)
	defer w.end()
	deadline := b.start.Add(r.cfg.lease - r.cfg.publishTimeout)
	// Each wave at the broker sends its results here; a run is in at most
	// one wave, so there are never more waves than runs.
	results := make(chan waveResult, len(w.runs))
	atBroker := 0
	for {
		wave, in, wait := w.nextWave()
		// No time left for a wave, or the relay is stopping: what is not
		// at the broker yet is given back, once what is there returned.
		stopping := ctx.Err() != nil || bctx.Err() != nil || !time.Now().Before(deadline)
		if len(wave) > 0 && !stopping {
			for _, j := range in {
				w.busy[j] = true
			}
			atBroker++
			go func() { results <- waveResult{in: in, errs: r.publishOnce(bctx, wave)} }()
		}
		if atBroker == 0 && (stopping || len(wait) == 0) {
			return
		}
		res, ok := awaitWave(ctx, bctx, results, wait, deadline, stopping)
		if !ok {
			continue // an earlier run is done, or time is up: look again
		}
		atBroker--
		w.record(res)
	}
}

// waves is where the publication of one batch's runs stands.
type waves struct {
	b       *batch
	runs    [][]int // indexes into b.send, see runsOf
	next    []int   // per run, the position of its next message
	busy    []bool  // the run's next message is at the broker
	stopped []bool  // publish no more of the run
	closed  []bool  // the run's runDone is closed
	// killed is, per aggregate, the first row that the claim found dead
	// (malformed, attempts used, too large): it stops its run where it
	// stands, its later rows are not published.
	killed map[aggregateKey]int64
}

func newWaves(b *batch) *waves {
	runs := runsOf(b.send)
	w := &waves{b: b, runs: runs, next: make([]int, len(runs)), busy: make([]bool, len(runs)),
		stopped: make([]bool, len(runs)), closed: make([]bool, len(runs)), killed: map[aggregateKey]int64{}}
	b.errs = make([]error, len(b.send))
	for _, d := range b.dead {
		if m := d.msg; m.AggregateType != "" || m.AggregateID != "" {
			if at, ok := w.killed[keyOf(m)]; !ok || m.RowID < at {
				w.killed[keyOf(m)] = m.RowID
			}
		}
	}
	return w
}

// nextWave returns the next message of every run that may go on, with the
// run of each in in, and the earlier batches' runs that runs of this batch
// wait for. It stops the runs behind a killed row or a failed earlier run.
func (w *waves) nextWave() (wave []*Message, in []int, wait []*runDone) {
	for j, run := range w.runs {
		if w.stopped[j] || w.busy[j] || w.next[j] == len(run) {
			continue
		}
		m := w.b.send[run[w.next[j]]]
		if at, ok := w.killed[keyOf(m)]; ok && m.RowID > at {
			w.stop(j)
			continue
		}
		if w.next[j] == 0 {
			if prev, failed := pendingRun(w.b.after[keyOf(m)]); failed {
				w.stop(j)
				continue
			} else if prev != nil {
				wait = append(wait, prev)
				continue
			}
		}
		wave, in = append(wave, m), append(in, j)
	}
	return wave, in, wait
}

// record sets the results of one wave; a message that failed stops its run.
func (w *waves) record(res waveResult) {
	for k, j := range res.in {
		w.b.errs[w.runs[j][w.next[j]]] = res.errs[k]
		w.next[j]++
		w.busy[j] = false
		w.stopped[j] = w.stopped[j] || res.errs[k] != nil
		if w.stopped[j] || w.next[j] == len(w.runs[j]) {
			w.finish(j)
		}
	}
}

func (w *waves) stop(j int) {
	w.stopped[j] = true
	w.finish(j)
}

// finish tells a later batch's run of the same aggregate that run j is
// over: as soon as it is, not when the whole batch is, so that the later
// run does not wait for the waves of other aggregates' longer runs.
func (w *waves) finish(j int) {
	if w.closed[j] {
		return
	}
	w.closed[j] = true
	run := w.runs[j]
	if rd := w.b.runs[keyOf(w.b.send[run[0]])]; rd != nil {
		rd.ok = !w.stopped[j] && w.next[j] == len(run)
		for _, i := range run[:w.next[j]] {
			rd.ok = rd.ok && w.b.errs[i] == nil
		}
		close(rd.done)
	}
}

// end gives back (errHeldBack) what was not published and finishes every
// run.
func (w *waves) end() {
	for j, run := range w.runs {
		for _, i := range run[w.next[j]:] {
			w.b.errs[i] = errHeldBack
		}
		w.finish(j)
	}
}

// waveResult is what one wave got from the broker: the runs whose messages
// it carried, and one result per message.
type waveResult struct {
	in   []int
	errs []error
}

// pendingRun returns the first of runs that is not done yet, or failed
// when one of those done did not go through.
func pendingRun(runs []*runDone) (pending *runDone, failed bool) {
	for _, rd := range runs {
		select {
		case <-rd.done:
			if !rd.ok {
				return nil, true
			}
		default:
			if pending == nil {
				pending = rd
			}
		}
	}
	return pending, false
}

// awaitWave waits for the results of a wave at the broker, which it
// returns with ok. Unless stopping, it also returns, without results, when
// one of runs is done, ctx or bctx ended, or the deadline passed.
func awaitWave(ctx, bctx context.Context, results chan waveResult, runs []*runDone, deadline time.Time,
	stopping bool) (waveResult, bool) {
	if stopping {
		return <-results, true
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	cases := make([]reflect.SelectCase, 0, len(runs)+4)
	for _, c := range []any{results, ctx.Done(), bctx.Done(), t.C} {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
	}
	for _, rd := range runs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(rd.done)})
	}
	chosen, v, _ := reflect.Select(cases)
	if chosen == 0 {
		return v.Interface().(waveResult), true
	}
	return waveResult{}, false
}

// publishOnce sends msgs within the publish timeout and returns one result
// per message.
func (r *Relay) publishOnce(bctx context.Context, msgs []*Message) []error {
	pctx, cancel := context.WithTimeout(bctx, r.cfg.publishTimeout)
	defer cancel()
	errs := r.pub.Publish(pctx, msgs)
	if len(errs) != len(msgs) {
		errs = ErrorsFor(len(msgs), fmt.Errorf("publisher returned %d results for %d messages", len(errs), len(msgs)))
	}
	return errs
}
