package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Waves: how an ordered relay publishes a batch that holds several messages
// of one aggregate.
//
// An ordered claim returns, for each aggregate, a run: a prefix of its
// pending rows in id order (see ClaimParams.Ordered). The relay publishes
// the batch in waves: wave i is the i-th message of every run still going,
// in one Publish call, and wave i+1 starts only when every result of wave i
// is in. So message k+1 of an aggregate goes to the broker only after the
// broker confirmed message k. A message that fails (to be retried, or dead)
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

// errHeldBack marks, in a batch's results, a message that was not
// published: an earlier message of its aggregate in the batch failed, the
// lease left no time for its wave, or the relay is stopping.
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

// publishWaves publishes b.send in waves (see above) and sets b.errs, in
// which a message not published carries errHeldBack. ctx is Run's, which a
// stop cancels; bctx is the batch's (see batchContext).
func (r *Relay) publishWaves(ctx, bctx context.Context, b *batch) {
	// A row killed at claim time (malformed, attempts used, too large)
	// stops its run where it stands: its later rows are not published.
	killed := map[aggregateKey]int64{}
	for _, d := range b.dead {
		if m := d.Message; m.AggregateType != "" || m.AggregateID != "" {
			if at, ok := killed[keyOf(m)]; !ok || m.RowID < at {
				killed[keyOf(m)] = m.RowID
			}
		}
	}
	runs := runsOf(b.send)
	next := make([]int, len(runs))     // per run, the position of its next message
	stopped := make([]bool, len(runs)) // the run failed: publish no more of it
	b.errs = make([]error, len(b.send))
	deadline := b.start.Add(r.cfg.lease - r.cfg.publishTimeout)
	var wave []*Message
	var in []int // the run of each message of wave
	for {
		wave, in = wave[:0], in[:0]
		for j, run := range runs {
			if stopped[j] || next[j] == len(run) {
				continue
			}
			m := b.send[run[next[j]]]
			if at, ok := killed[keyOf(m)]; ok && m.RowID > at {
				stopped[j] = true
				continue
			}
			wave, in = append(wave, m), append(in, j)
		}
		if len(wave) == 0 || ctx.Err() != nil || bctx.Err() != nil || time.Now().After(deadline) {
			break // done, or no time left for this wave: the rest is given back
		}
		errs := r.publishOnce(bctx, wave)
		for w, j := range in {
			b.errs[runs[j][next[j]]] = errs[w]
			next[j]++
			stopped[j] = stopped[j] || errs[w] != nil
		}
	}
	for j, run := range runs {
		for _, i := range run[next[j]:] {
			b.errs[i] = errHeldBack
		}
	}
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

// multiWave reports whether b must be published in more than one wave: with
// ordering, when a run holds more than one message.
func (r *Relay) multiWave(b *batch) bool {
	if !r.cfg.ordered {
		return false
	}
	seen := make(map[aggregateKey]struct{}, len(b.send))
	for _, m := range b.send {
		k := keyOf(m)
		if _, ok := seen[k]; ok {
			return true
		}
		seen[k] = struct{}{}
	}
	return false
}
