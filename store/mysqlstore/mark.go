package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/outboxkit/outbox"
)

// MaxErrorLength is the most bytes of an error or reason the Store keeps in
// last_error; longer texts are cut at a character boundary.
const MaxErrorLength = 4096

// fence is the condition every Ack, Reschedule and Kill shares: the row is
// still pending and its retry_count is still the attempt the claim handed out.
const fence = "o.id = a.id AND o.retry_count = a.attempt"

// Ack marks the messages sent (status 1), or deletes them when p.Delete, in
// one statement per 1,000 messages (several run in one transaction), fenced
// by each message's Attempt: only a row still pending whose retry_count
// equals the Attempt changes. It returns how many rows changed.
func (s *Store) Ack(ctx context.Context, p outbox.AckParams) (int, error) {
	ms := byRowID(p.Messages, func(m *outbox.Message) *outbox.Message { return m })
	n, err := s.batch(ctx, len(ms), func(tx execer, lo, hi int) (int64, error) {
		args := make([]any, 0, 2*(hi-lo))
		for _, m := range ms[lo:hi] {
			args = append(args, m.RowID, int64(m.Attempt))
		}
		a := derived(hi-lo, "CAST(? AS SIGNED) AS id", "CAST(? AS SIGNED) AS attempt")
		var q string
		if p.Delete {
			q = "DELETE o FROM " + s.table.quoted() + " AS o JOIN " + a + " ON " + fence + " WHERE o.status = 0"
		} else {
			q = "UPDATE " + s.table.quoted() + " AS o JOIN " + a + " ON " + fence +
				" SET o.status = 1, o.updated_at = UTC_TIMESTAMP(6) WHERE o.status = 0"
		}
		return execCount(ctx, tx, q, args)
	})
	if err != nil {
		return 0, fmt.Errorf("mysqlstore: ack: %w", err)
	}
	return int(n), nil
}

// Reschedule makes the messages due again at their Retry.At (stored in UTC)
// and records Retry.Err in last_error (when the table has it), fenced like
// Ack. With p.Refund the claim's attempt is given back (retry_count - 1). On
// a DATETIME column without fractional seconds the time keeps its seconds.
func (s *Store) Reschedule(ctx context.Context, p outbox.RescheduleParams) error {
	if len(p.Retries) == 0 {
		return nil
	}
	info, err := s.tableInfo(ctx, s.db)
	if err != nil {
		return fmt.Errorf("mysqlstore: reschedule: %w", err)
	}
	rs := byRowID(p.Retries, func(r outbox.Retry) *outbox.Message { return r.Message })
	_, err = s.batch(ctx, len(rs), func(tx execer, lo, hi int) (int64, error) {
		args := make([]any, 0, 4*(hi-lo))
		for _, r := range rs[lo:hi] {
			args = append(args, r.Message.RowID, int64(r.Message.Attempt), formatTime(r.At), errorText(r.Err))
		}
		a := derived(hi-lo, "CAST(? AS SIGNED) AS id", "CAST(? AS SIGNED) AS attempt",
			"CAST(? AS DATETIME(6)) AS at", "CAST(? AS CHAR) AS err")
		set := "o.next_retry_at = a.at, o.updated_at = UTC_TIMESTAMP(6)"
		if p.Refund {
			set += ", o.retry_count = a.attempt - 1"
		}
		if info.lastError {
			set += ", o.last_error = a.err"
		}
		q := "UPDATE " + s.table.quoted() + " AS o JOIN " + a + " ON " + fence + " SET " + set + " WHERE o.status = 0"
		return execCount(ctx, tx, q, args)
	})
	if err != nil {
		return fmt.Errorf("mysqlstore: reschedule: %w", err)
	}
	return nil
}

// Kill marks the messages dead (status 2) and records each Reason in
// last_error (when the table has it), fenced like Ack.
func (s *Store) Kill(ctx context.Context, p outbox.KillParams) error {
	if len(p.Dead) == 0 {
		return nil
	}
	info, err := s.tableInfo(ctx, s.db)
	if err != nil {
		return fmt.Errorf("mysqlstore: kill: %w", err)
	}
	ds := byRowID(p.Dead, func(d outbox.Dead) *outbox.Message { return d.Message })
	_, err = s.batch(ctx, len(ds), func(tx execer, lo, hi int) (int64, error) {
		args := make([]any, 0, 3*(hi-lo))
		for _, d := range ds[lo:hi] {
			args = append(args, d.Message.RowID, int64(d.Message.Attempt), errorText(d.Reason))
		}
		a := derived(hi-lo, "CAST(? AS SIGNED) AS id", "CAST(? AS SIGNED) AS attempt", "CAST(? AS CHAR) AS err")
		set := "o.status = 2, o.updated_at = UTC_TIMESTAMP(6)"
		if info.lastError {
			set += ", o.last_error = a.err"
		}
		q := "UPDATE " + s.table.quoted() + " AS o JOIN " + a + " ON " + fence + " SET " + set + " WHERE o.status = 0"
		return execCount(ctx, tx, q, args)
	})
	if err != nil {
		return fmt.Errorf("mysqlstore: kill: %w", err)
	}
	return nil
}

// byRowID returns a copy of xs sorted by the row id of each one's message, so
// that every statement locks rows in the same order and two batches that
// overlap (a relay that lost its lease and the one that took over) cannot
// deadlock.
func byRowID[T any](xs []T, msg func(T) *outbox.Message) []T {
	out := slices.Clone(xs)
	slices.SortStableFunc(out, func(a, b T) int { return cmp.Compare(msg(a).RowID, msg(b).RowID) })
	return out
}

// derived returns a derived table "a" of n rows whose columns are typed by
// the first row's expressions, e.g. (SELECT CAST(? AS SIGNED) AS id UNION
// ALL SELECT ?) AS a. It works on MySQL 8 and MariaDB alike, which spell
// table value constructors differently.
func derived(n int, first ...string) string {
	var b strings.Builder
	b.WriteString("(SELECT " + strings.Join(first, ", "))
	rest := " UNION ALL SELECT " + placeholders(len(first))
	for range n - 1 {
		b.WriteString(rest)
	}
	b.WriteString(") AS a")
	return b.String()
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// batch runs stmt over [0, n) in chunks of s.chunk rows and returns the sum
// of the rows they changed. One chunk runs on its own; several run in one
// READ COMMITTED transaction. A deadlock victim is run again.
func (s *Store) batch(ctx context.Context, n int, stmt func(tx execer, lo, hi int) (int64, error)) (int64, error) {
	if n == 0 {
		return 0, nil
	}
	var total int64
	err := retryDeadlock(ctx, func() (err error) {
		total, err = s.batchOnce(ctx, n, stmt)
		return err
	})
	return total, err
}

func (s *Store) batchOnce(ctx context.Context, n int, stmt func(tx execer, lo, hi int) (int64, error)) (int64, error) {
	if n <= s.chunk {
		return stmt(s.db, 0, n)
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
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

// errorText makes an error text fit for last_error: valid UTF-8 (a utf8mb4
// column in strict mode refuses anything else, failing the whole batch), at
// most MaxErrorLength bytes.
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
