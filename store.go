package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrDuplicate is returned (wrapped) by a store's InsertTx when a message ID
// is already in the table.
var ErrDuplicate = errors.New("outbox: duplicate message id")

// Store is the relay's view of the database. It never knows which broker is
// behind the relay. Implementations are safe for concurrent use, and several
// relays (in one process or many) may share one table.
type Store interface {
	// Claim takes up to p.Limit due pending rows that no other relay holds,
	// and in the same short transaction counts the attempt (retry_count + 1,
	// returned as Message.Attempt) and leases the rows until now + p.Lease by
	// pushing next_retry_at forward; or, when it returns Claim.Held, keeps the
	// rows locked in its open transaction instead of leasing them. Rows that
	// cannot be decoded come back in Claim.Malformed, claimed like the others,
	// so the relay can kill them.
	Claim(ctx context.Context, p ClaimParams) (*Claim, error)
	// Ack marks the messages sent (or deletes them when p.Delete), in one
	// statement, fenced by each message's Attempt: a row whose retry_count
	// moved on (another relay claimed it after this lease expired) or that is
	// no longer pending is left alone. It returns how many rows it changed.
	Ack(ctx context.Context, p AckParams) (int, error)
	// Reschedule makes the messages due again at their given times and records
	// the last error, fenced like Ack. With Refund the claim's attempt is not
	// counted (retry_count - 1): used when the destination was down as a whole
	// or the relay is shutting down before publishing.
	Reschedule(ctx context.Context, p RescheduleParams) error
	// Kill marks the messages dead (status 2) with their reasons, fenced like Ack.
	Kill(ctx context.Context, p KillParams) error
	// Stats reports the table's backlog. It is read-only and may be slow on a
	// large table; call it at most every few seconds.
	Stats(ctx context.Context) (*Stats, error)
}

// ClaimParams are the inputs of [Store.Claim].
type ClaimParams struct {
	// Limit is the most rows to claim; at least 1.
	Limit int
	// Lease is how long the claimed rows stay reserved for this relay.
	Lease time.Duration
	// Ordered claims, for each aggregate, at most a run: a prefix of the
	// aggregate's pending rows in id order, with no gaps, that starts at its
	// oldest pending row (none when its oldest row is dead and BlockOnDead).
	// A row is claimed only when every earlier pending (or dead, when
	// BlockOnDead) row of its aggregate is in this same claim: a row leased
	// by another claim, locked by a concurrent one, or waiting out a
	// backoff ends its aggregate's run. So message k+1 of an aggregate is
	// never handed out while message k is unacknowledged, unless k is in
	// the same claim, before it (Claim.Messages are in id order); the relay
	// then publishes k+1 only after the broker confirmed k. A store may
	// return shorter runs than it could, down to the head alone (a run of
	// one row), which is all that older stores return.
	Ordered bool
	// BlockOnDead, with Ordered, makes a dead row block its aggregate's later
	// rows until an operator retries or discards it.
	BlockOnDead bool
	// Chain, with Ordered, are the ids of rows this relay claimed earlier
	// and has not settled (its batches in flight). A store may count them
	// as part of this claim for the rule of Ordered, and so return the rows
	// that follow them (chained runs); the relay publishes such a row only
	// after the broker confirmed every row of its aggregate in the earlier
	// batch, and gives it back when one of those failed. A store may ignore
	// Chain.
	Chain []int64
	// Delete says whether the relay deletes acknowledged rows (true) or keeps
	// them as sent. Only a store that settles batches in the claim's own
	// transaction (see [Claim.Held]) needs to know it at claim time.
	Delete bool
	// Slot and Slots, with Ordered, are a preference: a store may take
	// first, as candidates, the due rows of the aggregates whose hash
	// modulo Slots is Slot, and then, when those come back short of
	// Limit, any due rows. Slots of 0 or 1 is no preference. The hash is
	// the store's own, computed by the database, so it is the same for
	// every relay of a table. The preference only changes which rows a
	// claim looks at first: what it keeps is decided by the rule of
	// Ordered, so two relays with the same slot, or a slot that is out of
	// date, cost speed, never order. The relay sets it from [Membership]
	// while it drains a backlog. A store may ignore it.
	Slot, Slots int
	// MaxPayload, when positive, is the largest payload in bytes the relay
	// sends. A store that supports it reads no more than about this much of
	// a larger payload, so that a batch of huge rows cannot exhaust the
	// relay's memory: it returns such a row in Claim.Malformed, with the
	// payload's size in the error, and without the payload. A store that
	// does not support it returns the payload, and the relay checks it.
	MaxPayload int
}

// Claim is the result of [Store.Claim].
type Claim struct {
	// Messages are the decoded rows, in id order, each with Attempt set.
	Messages []*Message
	// Malformed are rows that were claimed but could not be decoded (a NULL in
	// a required column, a payload that is not JSON, a payload over
	// ClaimParams.MaxPayload, ...). Each carries at least RowID and Attempt
	// so that it can be killed, and its Err names the row.
	Malformed []MalformedRow
	// ValidJSON says that the store has made sure every payload of Messages
	// whose content type is JSON (Message.JSONPayload) is valid JSON (its column type guarantees it, or it checked, putting
	// the rows that fail in Malformed), so the relay need not check again.
	ValidJSON bool
	// Held, when not nil, is the store's open transaction that holds the
	// claimed rows until the batch is settled. The relay then settles the
	// batch with one call of Held.Settle instead of Ack, Reschedule and Kill.
	Held HeldClaim
}

// HeldClaim is a claim whose rows a store keeps locked in an open transaction
// while the relay publishes them, so that a batch costs one transaction: no
// lease is written, each row is written once when the batch is settled, and
// one commit ends it. If the relay or its connection dies before Settle
// commits, the transaction rolls back and the rows are pending again, exactly
// as they were.
type HeldClaim interface {
	// Settle records what became of the batch and ends the transaction:
	// p.Sent are acknowledged (deleted or kept as sent, as the claim was told
	// by ClaimParams.Delete), p.Retries and p.Refunds made due again at their
	// times (a refund does not count the attempt), p.Dead marked dead; then
	// it commits. It returns how many of p.Sent it acknowledged. It must
	// be called exactly once. On error nothing of the batch may be taken as
	// recorded: the rows can be pending again, and the sent ones published
	// again (at-least-once).
	Settle(ctx context.Context, p SettleParams) (int, error)
}

// SettleParams are the inputs of [HeldClaim.Settle].
type SettleParams struct {
	Sent    []*Message // acknowledged by the broker
	Retries []Retry    // to publish again later, the attempt counted
	Refunds []Retry    // to publish again later, the attempt not counted
	Dead    []Dead     // to mark dead
}

// MalformedRow is a claimed row that could not be turned into a Message.
type MalformedRow struct {
	Message *Message // RowID, Attempt and whatever else could be read
	Err     error    // why it could not be decoded
}

// AckParams are the inputs of [Store.Ack].
type AckParams struct {
	Messages []*Message // RowID and Attempt are used
	// Delete removes the rows instead of setting status = 1.
	Delete bool
}

// RescheduleParams are the inputs of [Store.Reschedule].
type RescheduleParams struct {
	Retries []Retry
	// Refund uncounts the claim's attempt (retry_count - 1).
	Refund bool
}

// Retry is one message to make due again.
type Retry struct {
	Message *Message // RowID and Attempt are used
	At      time.Time
	Err     string // last error, stored where the table has a last_error column
}

// KillParams are the inputs of [Store.Kill].
type KillParams struct {
	Dead []Dead
}

// Dead is one message to mark dead.
type Dead struct {
	Message *Message // RowID and Attempt are used
	Reason  string
}

// Stats describes the outbox table's backlog.
type Stats struct {
	Pending        int64         // status 0, including leased rows
	OldestPending  time.Duration // age of the oldest pending row; 0 when none
	Dead           int64         // status 2
	SentLastMinute int64         // rows acked in the last minute (only when sent rows are kept)
	SentLastHour   int64         // rows acked in the last hour (only when sent rows are kept)
	// OtherStatus counts rows whose status is NULL or not 0, 1 or 2: rows
	// another program wrote or changed. The relay never claims, publishes,
	// retries or kills them, and they do not hold back ordered delivery, so
	// they would stay in the table unseen; they are counted here so that an
	// operator notices them (`outbox status` shows them as "other status").
	OtherStatus int64
}

// RowCounter is implemented by stores that can say how many of a batch's
// rows are still in the table. When an acknowledgement changes fewer rows
// than the relay sent, the relay asks, to tell the rows another relay took
// over (fenced: their lease ran out first) from rows that someone deleted
// meanwhile (an operator, or with delete_sent a relay that took them over),
// and logs and counts each as what it is.
type RowCounter interface {
	// CountRows returns how many rows with these ids the table holds,
	// whatever their status.
	CountRows(ctx context.Context, rowIDs []int64) (int, error)
}

// Migrator is implemented by stores that can create or upgrade their schema.
type Migrator interface {
	// Migrate creates the outbox table and its indexes, or adds what an older
	// version lacks. It is idempotent and safe to run from several processes.
	Migrate(ctx context.Context) error
}

// TableChecker is implemented by stores that can check, before the first
// claim, that their table is one the relay can work on. The daemon calls it
// before it starts, and exits with the error; [NewRelay] and [Relay.Run] do
// not call it (a library user who wants the check calls it, or runs
// Migrate, which makes the table right).
type TableChecker interface {
	// CheckTable returns nil when the table exists and has every contract
	// column in a type the relay reads; otherwise a *[TableError] naming
	// every problem and how to fix each, or the error that stopped it from
	// looking. It only reads the database's catalog (and may prepare the
	// relay's statements without running them).
	CheckTable(ctx context.Context) error
}

// IndexChecker is implemented by stores that can tell which of the indexes
// their claims use a table lacks. The relay works without them, only
// slower on a large table; the daemon logs each at start, with the
// statement that creates it.
type IndexChecker interface {
	// MissingIndexes returns one TableProblem per missing index: what
	// claims do without it, and the statement that creates it. It only
	// reads the database's catalog.
	MissingIndexes(ctx context.Context) ([]TableProblem, error)
}

// TableError is the error [TableChecker.CheckTable] returns for a table the
// relay cannot work on.
type TableError struct {
	Table    string         // the table as configured
	Problems []TableProblem // every problem found, at least one
}

// TableProblem is one thing wrong with a table, and how to fix it.
type TableProblem struct {
	Problem string // e.g. "column payload is bytea"
	Fix     string // e.g. "ALTER TABLE outbox_message ALTER COLUMN payload TYPE jsonb USING ..."
}

// Error lists the problems, one a line, each followed by its fix.
func (e *TableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "outbox: table %s cannot be used by the relay:", e.Table)
	for _, p := range e.Problems {
		fmt.Fprintf(&b, "\n  - %s", p.Problem)
		if p.Fix != "" {
			fmt.Fprintf(&b, "\n    fix: %s", p.Fix)
		}
	}
	return b.String()
}

// ErrNoMembership is matched (errors.Is) by the error a [Membership]'s
// Heartbeat returns when the store's table of relays does not exist and it
// could not create it (no privilege); the error says what to run. The relay
// then logs it once and claims without a slot preference.
var ErrNoMembership = errors.New("outbox: no table of relays")

// Membership is implemented by stores that keep a table of the relays of
// their outbox table, live while they heartbeat. Ordered relays use it to
// split the aggregates into slots, one per live relay, and claim their own
// slot's rows first while they drain a backlog ([ClaimParams].Slot): a
// preference, never a lock, so a view that is out of date (a relay that
// just joined or died) costs speed, never order. A relay heartbeats every
// third of its TTL ([WithRelayTTL]), off its claim path, and leaves when it
// stops. Implementations are safe for concurrent use.
type Membership interface {
	// Heartbeat records that relayID is live until the database's now +
	// ttl, removes the relays whose time ran out, and returns relayID's
	// rank among the live relays ordered by relay id (its slot, from 0)
	// and how many are live (count, at least 1). When the table of relays
	// is missing it tries to create it; if it cannot, the error matches
	// [ErrNoMembership].
	Heartbeat(ctx context.Context, relayID string, ttl time.Duration) (slot, count int, err error)
	// Leave removes relayID from the table, so that the others' slots
	// cover its aggregates at their next heartbeat.
	Leave(ctx context.Context, relayID string) error
}

// RelayLister is implemented by stores that implement [Membership] and can
// list the live relays of their table; `outbox status` shows them.
type RelayLister interface {
	// Relays returns the relays whose heartbeat has not run out, in slot
	// order (by relay id); none when the table of relays is missing.
	Relays(ctx context.Context) ([]RelayInfo, error)
}

// RelayInfo is a live relay of a table.
type RelayInfo struct {
	ID   string        // the relay's id: its name (if any), host, process id and a random part
	Left time.Duration // until its time runs out, unless it heartbeats again
}

// Pinger is implemented by stores and publishers that can check their
// connection; the daemon's /readyz uses it and the relay probes a destination
// that was down with it.
type Pinger interface {
	// Ping returns nil when the database or broker is reachable.
	Ping(ctx context.Context) error
}

// Notifier is implemented by stores that can wake a relay when new rows commit
// (PostgreSQL LISTEN/NOTIFY). Listen blocks until ctx is done or the
// listener fails, calling wake (which never blocks) for each notification; the
// relay falls back to polling while Listen is not running.
type Notifier interface {
	Listen(ctx context.Context, wake func()) error
}
