package sqlitestore

import (
	"context"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// chunkRows is how many messages one Ack, Reschedule, Kill or INSERT
// statement covers; a larger batch runs as several statements in one
// transaction. SQLite allows 32766 parameters per statement.
const chunkRows = 1000

// MaxErrorLength is the most bytes of an error or reason the Store keeps in
// last_error; longer texts are cut at a character boundary.
const MaxErrorLength = sqlcore.MaxErrorLength

// Ack marks the messages sent (status 1), or deletes them when p.Delete, in
// one statement per 1000 messages, fenced by each message's Attempt: only a
// row still pending whose retry_count equals the Attempt changes. It returns
// how many rows changed.
func (s *Store) Ack(ctx context.Context, p outbox.AckParams) (int, error) {
	return s.core.Ack(ctx, p, s.ackSQL)
}

// CountRows returns how many rows with these ids the table holds, whatever
// their status; part of [outbox.RowCounter].
func (s *Store) CountRows(ctx context.Context, rowIDs []int64) (int, error) {
	return s.core.CountRows(ctx, rowIDs)
}

// Reschedule makes the messages due again at their Retry.At and records
// Retry.Err in last_error (when the table has it), fenced like Ack. With
// p.Refund the claim's attempt is given back (retry_count - 1).
func (s *Store) Reschedule(ctx context.Context, p outbox.RescheduleParams) error {
	return s.core.Reschedule(ctx, p, s.rescheduleSQL)
}

// Kill marks the messages dead (status 2) and records each Reason in
// last_error (when the table has it), fenced like Ack.
func (s *Store) Kill(ctx context.Context, p outbox.KillParams) error {
	return s.core.Kill(ctx, p, s.killSQL)
}
