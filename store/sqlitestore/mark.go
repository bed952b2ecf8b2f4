package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/sqlids"
)

// chunkRows is how many messages one Ack, Reschedule, Kill or INSERT
// statement covers; a larger batch runs as several statements in one
// transaction. SQLite allows 32766 parameters per statement.
const chunkRows = 1000

// MaxErrorLength is the most bytes of an error or reason the Store keeps in
// last_error; longer texts are cut at a character boundary.
const MaxErrorLength = 4096

// Ack marks the messages sent (status 1), or deletes them when p.Delete, in
// one statement per 1000 messages, fenced by each message's Attempt: only a
// row still pending whose retry_count equals the Attempt changes. It returns
// how many rows changed.
func (s *Store) Ack(ctx context.Context, p outbox.AckParams) (int, error) {
	n, err := s.batch(ctx, len(p.Messages), func(tx execer, lo, hi int) (int64, error) {
		args := make([]any, 0, 2*(hi-lo)+1)
		for _, m := range p.Messages[lo:hi] {
			args = append(args, m.RowID, int64(m.Attempt))
		}
		t := s.table.quoted()
		v := "WITH v(id, attempt) AS (VALUES " + tuples(hi-lo, 2) + ") "
		var q string
		if p.Delete {
			q = v + "DELETE FROM " + t + " AS o WHERE o.status = 0 AND o.id IN (SELECT id FROM v)" +
				" AND (o.id, o.retry_count) IN (SELECT id, attempt FROM v)"
		} else {
			q = v + "UPDATE " + t + " AS o SET status = 1, updated_at = ? FROM v" +
				" WHERE o.id = v.id AND o.retry_count = v.attempt AND o.status = 0"
			args = append(args, formatTime(time.Now()))
		}
		return execCount(ctx, tx, q, args)
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: ack: %w", err)
	}
	return int(n), nil
}

// CountRows returns how many rows with these ids the table holds, whatever
// their status; part of [outbox.RowCounter].
func (s *Store) CountRows(ctx context.Context, rowIDs []int64) (int, error) {
	n, err := sqlids.Count(ctx, s.db, s.table.quoted(), rowIDs, s.chunk)
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: count rows: %w", err)
	}
	return n, nil
}

// Reschedule makes the messages due again at their Retry.At and records
// Retry.Err in last_error (when the table has it), fenced like Ack. With
// p.Refund the claim's attempt is given back (retry_count - 1).
func (s *Store) Reschedule(ctx context.Context, p outbox.RescheduleParams) error {
	cols, err := s.columnsIfAny(ctx, len(p.Retries))
	if err != nil {
		return fmt.Errorf("sqlitestore: reschedule: %w", err)
	}
	_, err = s.batch(ctx, len(p.Retries), func(tx execer, lo, hi int) (int64, error) {
		args := make([]any, 0, 4*(hi-lo)+1)
		for _, r := range p.Retries[lo:hi] {
			args = append(args, r.Message.RowID, int64(r.Message.Attempt), formatTime(r.At), errorText(r.Err))
		}
		set := "next_retry_at = v.at, updated_at = ?"
		if p.Refund {
			set += ", retry_count = v.attempt - 1"
		}
		if cols.lastError {
			set += ", last_error = v.err"
		}
		q := "WITH v(id, attempt, at, err) AS (VALUES " + tuples(hi-lo, 4) + ") UPDATE " + s.table.quoted() +
			" AS o SET " + set + " FROM v WHERE o.id = v.id AND o.retry_count = v.attempt AND o.status = 0"
		return execCount(ctx, tx, q, append(args, formatTime(time.Now())))
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: reschedule: %w", err)
	}
	return nil
}

// Kill marks the messages dead (status 2) and records each Reason in
// last_error (when the table has it), fenced like Ack.
func (s *Store) Kill(ctx context.Context, p outbox.KillParams) error {
	cols, err := s.columnsIfAny(ctx, len(p.Dead))
	if err != nil {
		return fmt.Errorf("sqlitestore: kill: %w", err)
	}
	_, err = s.batch(ctx, len(p.Dead), func(tx execer, lo, hi int) (int64, error) {
		args := make([]any, 0, 3*(hi-lo)+1)
		for _, d := range p.Dead[lo:hi] {
			args = append(args, d.Message.RowID, int64(d.Message.Attempt), errorText(d.Reason))
		}
		set := "status = 2, updated_at = ?"
		if cols.lastError {
			set += ", last_error = v.err"
		}
		q := "WITH v(id, attempt, err) AS (VALUES " + tuples(hi-lo, 3) + ") UPDATE " + s.table.quoted() +
			" AS o SET " + set + " FROM v WHERE o.id = v.id AND o.retry_count = v.attempt AND o.status = 0"
		return execCount(ctx, tx, q, append(args, formatTime(time.Now())))
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: kill: %w", err)
	}
	return nil
}

// columnsIfAny detects the table's columns unless there is nothing to do.
func (s *Store) columnsIfAny(ctx context.Context, n int) (columns, error) {
	if n == 0 {
		return columns{}, nil
	}
	return s.columns(ctx, s.db)
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// batch runs stmt over [0, n) in chunks of s.chunk rows and returns the sum of
// the rows they changed. One chunk runs on its own; several run in one
// transaction, so that the batch commits (and syncs) once.
func (s *Store) batch(ctx context.Context, n int, stmt func(tx execer, lo, hi int) (int64, error)) (int64, error) {
	if n == 0 {
		return 0, nil
	}
	var total int64
	err := s.write(ctx, func() (err error) {
		total, err = s.batchOnce(ctx, n, stmt)
		return err
	})
	return total, err
}

func (s *Store) batchOnce(ctx context.Context, n int, stmt func(tx execer, lo, hi int) (int64, error)) (int64, error) {
	if n <= s.chunk {
		return stmt(s.db, 0, n)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var total int64
	for lo := 0; lo < n; lo += s.chunk {
		k, err := stmt(tx, lo, min(lo+s.chunk, n))
		if err != nil {
			return 0, err
		}
		total += k
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return total, nil
}

func execCount(ctx context.Context, e execer, q string, args []any) (int64, error) {
	res, err := e.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// tuples returns n comma-separated groups of width placeholders: (?, ?), (?, ?).
func tuples(n, width int) string {
	one := "(" + strings.TrimSuffix(strings.Repeat("?, ", width), ", ") + ")"
	var b strings.Builder
	b.Grow(n * (len(one) + 2))
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(one)
	}
	return b.String()
}

// errorText makes an error text fit for last_error: valid UTF-8, at most
// MaxErrorLength bytes.
func errorText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxErrorLength {
		return s
	}
	cut := MaxErrorLength
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
