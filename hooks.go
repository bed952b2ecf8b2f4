package outbox

import "time"

// Result is what became of one message after a delivery attempt.
type Result string

// The results a relay reports to [HookMessage].
const (
	ResultSent        Result = "sent"        // confirmed by the broker and acknowledged
	ResultRetry       Result = "retry"       // failed, rescheduled with backoff
	ResultDead        Result = "dead"        // marked dead (attempts used, permanent failure, malformed)
	ResultUnavailable Result = "unavailable" // destination down; rescheduled without counting the attempt
	// ResultHeldBack: not published, given back without counting the
	// attempt, because an earlier message of its aggregate in the same
	// ordered batch failed, or the lease or a stop left no time for it.
	ResultHeldBack Result = "held_back"
)

// MessageEvent describes one message's attempt, for [HookMessage].
type MessageEvent struct {
	Message *Message
	Result  Result
	Err     error         // nil when sent
	Latency time.Duration // created_at to broker confirmation, when sent
}

// BatchEvent describes one claim-publish-acknowledge cycle, for [HookBatch].
type BatchEvent struct {
	Claimed  int           // rows claimed (including malformed ones)
	Sent     int           // acknowledged as sent
	Retried  int           // rescheduled with backoff
	Dead     int           // marked dead
	Fenced   int           // lost to another relay before the ack (the row is still there)
	Gone     int           // published, but the row was deleted before the ack (see [RowCounter])
	Duration time.Duration // claim to acknowledgement
	Err      error         // a store error that cut the cycle short
}

// HookBatch is called after every claim-publish-acknowledge cycle that claimed
// at least one row, and after a claim that failed (but not after one that a
// stop of the relay cut short).
type HookBatch interface {
	OnBatch(BatchEvent)
}

// HookClaim is called after every claim with its error: nil when the claim
// succeeded, whether it found rows or not. It is not called after a claim
// that a stop of the relay cut short. A readiness check uses it to see a
// relay whose claims keep failing (a table changed under it).
type HookClaim interface {
	OnClaim(err error)
}

// HookMessage is called once for every message of a batch with its result.
type HookMessage interface {
	OnMessage(MessageEvent)
}

// HookDestination is called when the relay finds the destination down (up =
// false, and it pauses to probe) and when it finds it back (up = true).
type HookDestination interface {
	OnDestination(up bool, err error)
}
