package outbox

import (
	"context"
	"time"
)

// Admin is implemented by stores that support the operator commands
// (`outbox dead`, `outbox archive`). Every method works in bounded batches
// and short transactions, so it is safe to call while relays run.
type Admin interface {
	// ListDead returns dead messages matching f, oldest first, at most f.Limit
	// (a store may cap it).
	ListDead(ctx context.Context, f DeadFilter) ([]DeadMessage, error)
	// RetryDead puts the dead messages matching f back to pending with a fresh
	// attempt count (retry_count = 0, next_retry_at = NULL, last_error kept
	// until the next attempt) and returns how many it changed.
	RetryDead(ctx context.Context, f DeadFilter) (int64, error)
	// DiscardDead deletes the dead messages matching f and returns how many.
	DiscardDead(ctx context.Context, f DeadFilter) (int64, error)
	// Archive moves up to p.Batch sent rows whose updated_at is older than
	// p.OlderThan into the archive table (created by the first call that has
	// a row to move), or deletes them when p.Delete, in one short
	// transaction, and returns how many rows it moved. Callers loop until it
	// returns 0.
	Archive(ctx context.Context, p ArchiveParams) (int64, error)
}

// DeadFilter selects dead messages. Zero fields match everything; set fields
// are combined with AND.
type DeadFilter struct {
	RowIDs        []int64       // exact rows
	EventType     string        // exact event type
	AggregateType string        // exact aggregate type
	AggregateID   string        // exact aggregate id
	OlderThan     time.Duration // died (updated_at) at least this long ago
	ErrorContains string        // substring of last_error (where the column exists)
	Limit         int           // most rows ListDead returns; 0 means a store default (100)
	// MaxPayload, when positive, is the largest payload in bytes ListDead
	// reads: a larger one (a row killed for being over the relay's limit,
	// say) is left out, its Message.Payload nil, so that listing many such
	// rows cannot exhaust memory. DeadMessage.PayloadSize has its size.
	MaxPayload int
}

// DeadMessage is a dead row, for [Admin.ListDead].
type DeadMessage struct {
	Message  *Message
	Attempts int       // retry_count
	Reason   string    // last_error, where the column exists
	DiedAt   time.Time // updated_at
	// PayloadSize is the payload's size in bytes, also when it was not read
	// (DeadFilter.MaxPayload).
	PayloadSize int64
	// Behind is how many pending messages of its aggregate come after it
	// (higher row ids), counted up to MaxDeadBehind: MaxDeadBehind+1 means
	// more. With ordering and the dead policy DeadBlocks (the defaults)
	// they wait until it is retried or discarded.
	Behind int64
}

// MaxDeadBehind is the most pending messages behind a dead one that
// [Admin.ListDead] counts ([DeadMessage].Behind).
const MaxDeadBehind = 1000

// ArchiveParams are the inputs of [Admin.Archive].
type ArchiveParams struct {
	OlderThan time.Duration // only sent rows last updated at least this long ago
	Batch     int           // rows per call; at least 1
	Delete    bool          // delete instead of moving to the archive table
}
