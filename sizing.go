package outbox

import "time"

// sizing is how a relay sizes its work from what its claims find and how
// fast the database and the broker answer: how many rows the next claim
// takes, how many batches may be at the broker at once, and how long to wait
// before the next claim. It never leaves the bounds of the relay's options
// ([WithBatchSizeRange], [WithMaxInFlightRange]); with bounds that are equal
// ([WithBatchSize], [WithMaxInFlight]) the size is fixed.
//
//   - A claim that comes back full (a backlog) doubles the batch size, up to
//     its maximum. Once the batch is at its maximum, a claim that had to
//     wait for a free slot (the broker is the bottleneck) allows one more
//     batch in flight.
//   - A claim that comes back short halves the batch size, but keeps it at
//     least twice what the claim found, so that an ordered claim, short
//     because the aggregates' next messages wait behind batches in flight,
//     still gets all it could. If it had to wait for a free slot, messages
//     trickling in waited for the broker: one more batch may be in flight.
//   - An empty claim halves the batch size, down to its minimum.
//   - A claim slower than half the store timeout, or a batch whose claim,
//     publish and acknowledgement took longer than half the publish
//     timeout, halves the batch size: large batches must never make the
//     database or the broker time out.
//   - After a full claim the next claim follows at once; after a claim that
//     found some rows, after the minimum poll interval. After an empty claim
//     the relay waits a quarter of the time it has found nothing (since the
//     start of its last claim that found rows), at least the minimum poll
//     interval and at most the poll interval. A pause of a few milliseconds
//     between the commits of a steady stream thus keeps the waits at the
//     minimum, and a stall of the writers adds at most a quarter of its
//     length to the next message's latency, while a relay left idle backs
//     off to one claim per poll interval within about four poll intervals,
//     and stays there.
//   - Batches allowed in flight only grow during a stream of claims; they
//     go back to their minimum, with the batch size, when the relay is idle
//     (its wait reached the poll interval). One empty claim amid a trickle
//     therefore does not make the next claims wait for the broker.
//
// A sizing belongs to one Run loop and is not safe for concurrent use.
type sizing struct {
	minBatch, maxBatch       int
	minInFlight, maxInFlight int
	minPoll, poll            time.Duration
	slowClaim, slowBatch     time.Duration

	batch    int // rows the next claim takes
	inFlight int // batches that may be in flight
	// found is when the last claim that found rows started; zero after a
	// reset, until the next claim. idle is set while empty claims wait the
	// whole poll interval, as when the relay starts.
	found time.Time
	idle  bool
}

// backoffShare is the part (1/backoffShare) of the time an active relay has
// found nothing that it waits before its next claim.
const backoffShare = 4

// claimSeen is what the loop saw of one claim: when it started, how long it
// took, how many rows it asked for (limit) and found, and whether it had to
// wait for a batch in flight to settle first (waited).
type claimSeen struct {
	start    time.Time
	took     time.Duration
	limit, n int
	waited   bool
}

func newSizing(c *relayConfig) *sizing {
	return &sizing{
		minBatch: c.minBatch, maxBatch: c.maxBatch,
		minInFlight: c.minInFlight, maxInFlight: c.maxInFlight,
		minPoll: min(c.minPollInterval, c.pollInterval), poll: c.pollInterval,
		slowClaim: c.storeTimeout / 2, slowBatch: c.publishTimeout / 2,
		batch: c.minBatch, inFlight: c.minInFlight,
		idle: true,
	}
}

// claimed records a claim and returns how long to wait, from its end,
// before the next claim.
func (s *sizing) claimed(c claimSeen) time.Duration {
	if c.n == 0 {
		return s.empty(c)
	}
	s.found, s.idle = c.start, false
	switch {
	case c.took > s.slowClaim:
		s.shrink(0)
	case c.n >= c.limit:
		if s.batch < s.maxBatch {
			s.batch = min(2*s.batch, s.maxBatch)
		} else if c.waited {
			s.inFlight = min(s.inFlight+1, s.maxInFlight)
		}
	default:
		s.shrink(c.n)
		if c.waited {
			s.inFlight = min(s.inFlight+1, s.maxInFlight)
		}
	}
	if c.n >= c.limit {
		return 0
	}
	return s.minPoll
}

// empty records a claim that found nothing and returns the wait before the
// next one: a share of the time the relay has found nothing, within the
// poll interval bounds. Once that reaches the poll interval the relay is idle,
// and its sizes are back at their minimums.
func (s *sizing) empty(c claimSeen) time.Duration {
	s.shrink(0)
	if s.found.IsZero() && !s.idle { // the first claim after a reset
		s.found = c.start
	}
	wait := s.poll
	if !s.idle {
		wait = min(max(c.start.Sub(s.found)/backoffShare, s.minPoll), s.poll)
	}
	if wait >= s.poll {
		s.idle = true
		s.batch, s.inFlight = s.minBatch, s.minInFlight
	}
	return wait
}

// settled records a batch that took d from its claim to its settling.
func (s *sizing) settled(d time.Duration) {
	if d > s.slowBatch {
		s.shrink(0)
	}
}

// shrink halves the batch size, keeping it at least 2 × found and within its bounds.
func (s *sizing) shrink(found int) {
	s.batch = max(s.batch/2, 2*found, s.minBatch)
	s.batch = min(s.batch, s.maxBatch)
}

// reset starts over after the relay probed a destination that was down, or
// a store call failed: the next claim is one of the smallest, with the
// fewest batches in flight, and empty claims back off as if the last rows
// were found at the next claim.
func (s *sizing) reset() {
	s.batch, s.inFlight = s.minBatch, s.minInFlight
	s.found, s.idle = time.Time{}, false
}
