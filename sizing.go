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
//   - An empty claim halves the batch size and allows one batch fewer in
//     flight, down to their minimums: an idle relay gets there in a few
//     claims, while one empty claim in a stream of messages (common when
//     the relay looks every few milliseconds) costs little.
//   - A claim slower than half the store timeout, or a batch whose claim,
//     publish and acknowledgement took longer than half the publish
//     timeout, halves the batch size: large batches must never make the
//     database or the broker time out.
//   - After a full claim the next claim follows at once; after a short one,
//     after the minimum poll interval; after an empty one, after a wait that
//     doubles with each empty claim up to the poll interval, so an idle relay
//     costs one claim per poll interval.
//
// A sizing belongs to one Run loop and is not safe for concurrent use.
type sizing struct {
	minBatch, maxBatch       int
	minInFlight, maxInFlight int
	minPoll, poll            time.Duration
	slowClaim, slowBatch     time.Duration

	batch    int           // rows the next claim takes
	inFlight int           // batches that may be in flight
	delay    time.Duration // the wait after the next empty claim
}

func newSizing(c *relayConfig) *sizing {
	return &sizing{
		minBatch: c.minBatch, maxBatch: c.maxBatch,
		minInFlight: c.minInFlight, maxInFlight: c.maxInFlight,
		minPoll: min(c.minPollInterval, c.pollInterval), poll: c.pollInterval,
		slowClaim: c.storeTimeout / 2, slowBatch: c.publishTimeout / 2,
		batch: c.minBatch, inFlight: c.minInFlight,
		delay: c.pollInterval, // start as an idle relay
	}
}

// claimed records a claim of limit rows that found n in took; waited says
// whether the claim had to wait for a batch in flight to settle first. It
// returns how long to wait before the next claim.
func (s *sizing) claimed(limit, n int, took time.Duration, waited bool) time.Duration {
	switch {
	case n == 0:
		s.shrink(0)
		s.inFlight = max(s.inFlight-1, s.minInFlight)
		wait := s.delay
		s.delay = min(2*s.delay, s.poll)
		return wait
	case took > s.slowClaim:
		s.shrink(0)
	case n >= limit:
		if s.batch < s.maxBatch {
			s.batch = min(2*s.batch, s.maxBatch)
		} else if waited {
			s.inFlight = min(s.inFlight+1, s.maxInFlight)
		}
	default:
		s.shrink(n)
		if waited {
			s.inFlight = min(s.inFlight+1, s.maxInFlight)
		}
	}
	s.delay = s.minPoll
	if n >= limit {
		return 0
	}
	return s.minPoll
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
// fewest batches in flight, and an empty claim waits the minimum poll
// interval first.
func (s *sizing) reset() {
	s.batch, s.inFlight, s.delay = s.minBatch, s.minInFlight, s.minPoll
}
