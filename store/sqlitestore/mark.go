package sqlitestore

import (
	"context"
	"time"

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

// ackSQL returns the statement that acknowledges ms (not empty), and its
// arguments: each message's id and attempt, then (unless del) now.
func (s *Store) ackSQL(ms []*outbox.Message, del bool) (string, []any) {
	args := make([]any, 0, 2*len(ms)+1)
	for _, m := range ms {
		args = append(args, m.RowID, int64(m.Attempt))
	}
	t := s.table.quoted()
	v := "WITH v(id, attempt) AS (VALUES " + sqlcore.Tuples(len(ms), 2) + ") "
	if del {
		return v + "DELETE FROM " + t + " AS o WHERE o.status = 0 AND o.id IN (SELECT id FROM v)" +
			" AND (o.id, o.retry_count) IN (SELECT id, attempt FROM v)", args
	}
	return v + "UPDATE " + t + " AS o SET status = 1, updated_at = ? FROM v" +
		" WHERE o.id = v.id AND o.retry_count = v.attempt AND o.status = 0", append(args, formatTime(time.Now()))
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

// rescheduleSQL is the statement that reschedules n messages; its
// parameters are each message's id, attempt, time and error text, then now.
func (s *Store) rescheduleSQL(cols sqlcore.Columns, refund bool, n int) string {
	set := "next_retry_at = v.at, updated_at = ?"
	if refund {
		set += ", retry_count = v.attempt - 1"
	}
	if cols.LastError {
		set += ", last_error = v.err"
	}
	return "WITH v(id, attempt, at, err) AS (VALUES " + sqlcore.Tuples(n, 4) + ") UPDATE " + s.table.quoted() +
		" AS o SET " + set + " FROM v WHERE o.id = v.id AND o.retry_count = v.attempt AND o.status = 0"
}

// Kill marks the messages dead (status 2) and records each Reason in
// last_error (when the table has it), fenced like Ack.
func (s *Store) Kill(ctx context.Context, p outbox.KillParams) error {
	return s.core.Kill(ctx, p, s.killSQL)
}

// killSQL is the statement that kills n messages; its parameters are each
// message's id, attempt and reason, then now.
func (s *Store) killSQL(cols sqlcore.Columns, n int) string {
	set := "status = 2, updated_at = ?"
	if cols.LastError {
		set += ", last_error = v.err"
	}
	return "WITH v(id, attempt, err) AS (VALUES " + sqlcore.Tuples(n, 3) + ") UPDATE " + s.table.quoted() +
		" AS o SET " + set + " FROM v WHERE o.id = v.id AND o.retry_count = v.attempt AND o.status = 0"
}
