package sqlcore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/internal/rowcheck"
)

// Core is what the stores do alike on their table, through the dialect:
// inserting, acknowledging, rescheduling and killing in chunks of
// statements, counting rows, the dead-letter admin and moving archived
// rows. A store builds one in its constructor, calls it from its own
// methods and embeds its Shared methods (pgstore its Admin methods).
type Core struct {
	D  *Dialect
	DB *sql.DB // for the transactions; nil for a store that has its own (pgstore)
	// Run runs the statements that need no transaction; Shared and Admin
	// set SQLRunner{DB} where it is nil.
	Run   Runner
	Table string // quoted, as it goes into SQL
	Chunk int    // messages per statement
	// Columns returns the table's optional columns, detecting them through
	// q on first use.
	Columns func(ctx context.Context, q Queryer) (Columns, error)
	// Write runs f, again where the database asks for it (a deadlock victim,
	// a busy database).
	Write func(ctx context.Context, f func() error) error
	// TxOptions are those of the transactions Batch opens.
	TxOptions *sql.TxOptions
	// Prepare returns q prepared on DB, for a store that keeps its
	// statements prepared (SQLite parses every statement it runs
	// otherwise), or nil to run q as it is. nil: nothing is prepared.
	Prepare func(ctx context.Context, q string) *sql.Stmt
	// Map rewrites every statement for a table whose columns have other
	// names; nil runs them as they are.
	Map *colmap.Rewriter
	// RescheduleSQL and KillSQL build the store's statements of n
	// messages (see Reschedule and Kill).
	RescheduleSQL func(cols Columns, refund bool, n int) string
	KillSQL       func(cols Columns, n int) string
}

const (
	// DefaultDeadLimit is how many rows ListDead returns when the filter says 0.
	DefaultDeadLimit = 100
	// MaxDeadLimit caps ListDead.
	MaxDeadLimit = 10_000
	// AdminBatch is how many rows RetryDead and DiscardDead change per statement.
	AdminBatch = 1000
	// MaxArchiveBatch caps the rows one Archive call moves.
	MaxArchiveBatch = 10_000
)

func (c *Core) errorf(what string, err error) error {
	return fmt.Errorf("%s: %s: %w", c.D.Store, what, err)
}

// CheckClaim returns the error of a claim whose limit or lease no claim can take.
func (d *Dialect) CheckClaim(p outbox.ClaimParams) error {
	if p.Limit < 1 {
		return fmt.Errorf("%s: claim: limit %d is less than 1", d.Store, p.Limit)
	}
	if p.Lease <= 0 {
		return fmt.Errorf("%s: claim: lease %v is not positive", d.Store, p.Lease)
	}
	if p.Slots > 1 && (p.Slot < 0 || p.Slot >= p.Slots) {
		return fmt.Errorf("%s: claim: slot %d is not between 0 and %d", d.Store, p.Slot, p.Slots-1)
	}
	return nil
}

// deadWhere builds the condition selecting the dead rows f matches, and its arguments.
func (d *Dialect) deadWhere(cols Columns, f outbox.DeadFilter) (string, []any, error) {
	conds := []string{"status = 2"}
	var args []any
	if len(f.RowIDs) > 0 {
		conds = append(conds, "id IN ("+Placeholders(len(f.RowIDs))+")")
		for _, id := range f.RowIDs {
			args = append(args, id)
		}
	}
	for _, c := range []struct{ col, v string }{
		{"event_type", f.EventType}, {"aggregate_type", f.AggregateType}, {"aggregate_id", f.AggregateID},
	} {
		if c.v != "" {
			conds = append(conds, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	if f.OlderThan > 0 {
		conds = append(conds, d.UpdatedBefore)
		args = append(args, d.AgeArg(f.OlderThan))
	}
	if f.ErrorContains != "" {
		if !cols.LastError {
			return "", nil, errors.New("the table has no last_error column to search")
		}
		conds = append(conds, cmp.Or(d.ErrorContains, "INSTR(last_error, ?) > 0"))
		args = append(args, f.ErrorContains)
	}
	return strings.Join(conds, " AND "), args, nil
}

// ListDead lists the dead rows f matches (see outbox.Admin).
func (c *Core) ListDead(ctx context.Context, f outbox.DeadFilter) ([]outbox.DeadMessage, error) {
	cols, err := c.Columns(ctx, c.DB)
	if err != nil {
		return nil, c.errorf("list dead", err)
	}
	where, args, err := c.D.deadWhere(cols, f)
	if err != nil {
		return nil, c.errorf("list dead", err)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultDeadLimit
	}
	sel, maxPayload := SelectColumns(cols), rowcheck.PayloadLimit(f.MaxPayload)
	var out []outbox.DeadMessage
	err = c.Run.Query(ctx, c.Map.SQL(c.listDeadSQL(cols, where, maxPayload)), append(args, min(limit, MaxDeadLimit)),
		func(rows Scanner) error {
			d, err := c.D.scanDead(rows, sel, maxPayload)
			if err != nil {
				return fmt.Errorf("read row: %w", err)
			}
			out = append(out, d)
			return nil
		})
	if err != nil {
		return nil, c.errorf("list dead", err)
	}
	if err := c.countBehind(ctx, out); err != nil {
		return nil, c.errorf("list dead", err)
	}
	return out, nil
}

// behindSQL counts, up to outbox.MaxDeadBehind+1 (which means more), the
// pending rows of an aggregate after a row id: its parameters are the
// aggregate's type and id and the row id. One statement a dead row, not a
// subquery of listDeadSQL's: MariaDB refuses a LIMIT where the count would
// refer to the outer row, and without one a dead row with a million rows
// behind it took over a minute.
func (c *Core) behindSQL() string {
	return "SELECT count(*) FROM (SELECT 1 FROM " + c.Table + " WHERE aggregate_type = ? AND aggregate_id = ?" +
		" AND status = 0 AND id > ? LIMIT " + strconv.Itoa(outbox.MaxDeadBehind+1) + ") AS b"
}

// countBehind sets the Behind of each of dead (outbox.DeadMessage.Behind).
func (c *Core) countBehind(ctx context.Context, dead []outbox.DeadMessage) error {
	q := c.Map.SQL(c.behindSQL())
	for i := range dead {
		m := dead[i].Message
		if m == nil {
			continue
		}
		err := c.Run.Query(ctx, q, []any{m.AggregateType, m.AggregateID, m.RowID}, func(rows Scanner) error {
			return rows.Scan(&dead[i].Behind)
		})
		if err != nil {
			return fmt.Errorf("count the rows behind row %d: %w", m.RowID, err)
		}
	}
	return nil
}

// listDeadSQL is ListDead's statement for the condition where; its
// parameters are where's, then the limit.
func (c *Core) listDeadSQL(cols Columns, where string, maxPayload int) string {
	lastErr := "NULL"
	if cols.LastError {
		lastErr = "c.last_error"
	}
	return "SELECT " + c.D.DeadHead + ", " + c.D.ClaimColumns("c.", SelectColumns(cols), maxPayload) + ", " + lastErr +
		", c.updated_at, " + c.D.PayloadSize("c.", cols) + " FROM " + c.Table + " AS c WHERE " + where +
		" ORDER BY c.id LIMIT ?"
}

// Statements returns, by name, the statements Core builds for a table with
// cols and the archive table archive (quoted), with every filter of the
// dead-letter admin, so that a store's test can prepare each of them on its
// database.
func (c *Core) Statements(cols Columns, archive string) (map[string]string, error) {
	f := outbox.DeadFilter{RowIDs: []int64{1, 2}, EventType: "e", AggregateType: "t", AggregateID: "i", OlderThan: 1}
	if cols.LastError {
		f.ErrorContains = "x"
	}
	where, _, err := c.D.deadWhere(cols, f)
	if err != nil {
		return nil, err
	}
	in := " WHERE id IN (" + Placeholders(2) + ")"
	return map[string]string{
		"list dead":         c.listDeadSQL(cols, where, 0),
		"list dead partial": c.listDeadSQL(cols, where, 100),
		"dead behind":       c.behindSQL(),
		"retry dead":        fmt.Sprintf(c.D.RetryDead, c.Table, where, AdminBatch),
		"discard dead":      fmt.Sprintf(c.D.DiscardDead, c.Table, where, AdminBatch),
		"archive copy":      "INSERT INTO " + archive + " (id) SELECT id FROM " + c.Table + in,
		"archive delete":    "DELETE FROM " + c.Table + in,
	}, nil
}

// scanDead reads a row of ListDead: id, attempts, the columns sel, the last
// error, when it died and the payload's size.
func (d *Dialect) scanDead(rows Scanner, sel []string, maxPayload int) (outbox.DeadMessage, error) {
	var id, retries int64
	var lastErr, diedAt, size any
	r, err := d.Scan(rows, sel, maxPayload, nil, []any{&id, &retries}, []any{&lastErr, &diedAt, &size})
	if err != nil {
		return outbox.DeadMessage{}, err
	}
	// A dead row may well be malformed (r.Err): list what there is.
	r.Message.RowID = id
	dead := outbox.DeadMessage{Message: r.Message, Attempts: int(retries)}
	dead.PayloadSize, _ = size.(int64)
	dead.Reason, _, _ = Text(lastErr)
	dead.DiedAt, _ = d.ParseTime(diedAt)
	return dead, nil
}

// RetryDead makes the dead rows f matches pending again (see outbox.Admin).
func (c *Core) RetryDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	return c.eachDeadBatch(ctx, "retry dead", f, c.D.RetryDead, c.D.NowArg)
}

// DiscardDead deletes the dead rows f matches (see outbox.Admin).
func (c *Core) DiscardDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	return c.eachDeadBatch(ctx, "discard dead", f, c.D.DiscardDead, nil)
}

// eachDeadBatch runs stmt (a format of the dialect's RetryDead or
// DiscardDead, with a leading argument now() when now is set) until it
// changes fewer rows than a batch.
func (c *Core) eachDeadBatch(ctx context.Context, what string, f outbox.DeadFilter, stmt string, now func() any) (int64, error) {
	cols, err := c.Columns(ctx, c.DB)
	if err != nil {
		return 0, c.errorf(what, err)
	}
	where, args, err := c.D.deadWhere(cols, f)
	if err != nil {
		return 0, c.errorf(what, err)
	}
	q := fmt.Sprintf(stmt, c.Table, where, AdminBatch)
	var total int64
	for {
		all := args
		if now != nil {
			all = append([]any{now()}, args...)
		}
		var n int64
		err := c.Write(ctx, func() (err error) {
			n, err = c.Run.Exec(ctx, c.Map.SQL(q), all)
			return err
		})
		if err != nil {
			return total, c.errorf(what, err)
		}
		total += n
		if n < AdminBatch {
			return total, nil
		}
	}
}

// Batch runs stmt over [0, n) in chunks of c.Chunk rows and returns the sum
// of the rows they changed. One chunk runs on its own; several run in one
// transaction, so that the batch commits once. It runs through c.Write.
func (c *Core) Batch(ctx context.Context, n int, stmt func(e Execer, lo, hi int) (int64, error)) (int64, error) {
	if n == 0 {
		return 0, nil
	}
	var total int64
	err := c.Write(ctx, func() (err error) {
		total, err = c.batchOnce(ctx, n, stmt)
		return err
	})
	return total, err
}

func (c *Core) batchOnce(ctx context.Context, n int, stmt func(e Execer, lo, hi int) (int64, error)) (int64, error) {
	if n <= c.Chunk {
		return stmt(c.In(nil), 0, n)
	}
	var total int64
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		for lo := 0; lo < n; lo += c.Chunk {
			k, err := stmt(c.In(tx), lo, min(lo+c.Chunk, n))
			if err != nil {
				return err
			}
			total += k
		}
		return nil
	})
	return total, err
}

// In runs statements in tx, or on c.DB when tx is nil, each prepared once
// when c.Prepare gives it.
func (c *Core) In(tx *sql.Tx) Prepared { return Prepared{c: c, tx: tx} }

// Prepared runs statements in a transaction or on the Core's DB (see In).
type Prepared struct {
	c  *Core
	tx *sql.Tx
}

// stmt returns q prepared for p (bound to p's transaction), or nil.
func (p Prepared) stmt(ctx context.Context, q string) *sql.Stmt {
	if p.c.Prepare == nil {
		return nil
	}
	st := p.c.Prepare(ctx, q)
	if st != nil && p.tx != nil {
		st = p.tx.StmtContext(ctx, st)
	}
	return st
}

// on is what runs the statements that are not prepared.
func (p Prepared) on() interface {
	QueryExecer
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
} {
	if p.tx != nil {
		return p.tx
	}
	return p.c.DB
}

// ExecContext runs q and returns its result.
func (p Prepared) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return p.on().ExecContext(ctx, q, args...)
}

// QueryContext runs q and returns its rows.
func (p Prepared) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := p.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return p.on().QueryContext(ctx, q, args...)
}

// QueryRowContext runs q for one row.
func (p Prepared) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := p.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return p.on().QueryRowContext(ctx, q, args...)
}

// InTx runs f in a transaction (c.TxOptions), which it commits when f
// returns nil and rolls back otherwise, through c.Write: a transaction the
// database gave up on (a deadlock victim, a busy database) runs again.
func (c *Core) InTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	return c.Write(ctx, func() error { return c.inTx(ctx, f) })
}

// inTx is InTx without c.Write: one attempt.
func (c *Core) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := c.DB.BeginTx(ctx, c.TxOptions)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// InsertTx inserts msgs in tx with one statement per c.Chunk messages,
// rows in the order given: stmt(names, n) is the INSERT of n rows of the
// columns names (InsertColumns), whose parameters are lead, then each row's
// values (RowValues). A MessageID already in the table fails it with an
// error matching outbox.ErrDuplicate.
func (c *Core) InsertTx(ctx context.Context, tx *sql.Tx, msgs []*outbox.Message,
	stmt func(names []string, n int) string, lead ...any) error {
	if len(msgs) == 0 {
		return nil
	}
	cols, err := c.Columns(ctx, tx)
	if err != nil {
		return c.errorf("insert", err)
	}
	names := InsertColumns(cols)
	for lo := 0; lo < len(msgs); lo += c.Chunk {
		chunk := msgs[lo:min(lo+c.Chunk, len(msgs))]
		args := append(make([]any, 0, len(lead)+len(chunk)*len(names)), lead...)
		for i, m := range chunk {
			vals, err := RowValues(m, cols)
			if err != nil {
				return fmt.Errorf("%s: insert message %d: %w", c.D.Store, lo+i, err)
			}
			args = append(args, vals...)
		}
		if _, err := c.In(tx).ExecContext(ctx, c.Map.SQL(stmt(names, len(chunk))), args...); err != nil {
			if c.D.Duplicate(err) {
				err = fmt.Errorf("%w: %w", outbox.ErrDuplicate, err)
			}
			return fmt.Errorf("%s: insert %d messages: %w", c.D.Store, len(chunk), err)
		}
	}
	return nil
}

// Ack acknowledges the messages (see outbox.Store.Ack) in row id order
// (ByRowID), in chunks (Batch): stmt(ms, del) is the statement that
// acknowledges the messages ms, and its arguments.
func (c *Core) Ack(ctx context.Context, p outbox.AckParams, stmt func(ms []*outbox.Message, del bool) (string, []any)) (int, error) {
	ms := ByRowID(p.Messages, func(m *outbox.Message) *outbox.Message { return m })
	n, err := c.Batch(ctx, len(ms), func(e Execer, lo, hi int) (int64, error) {
		q, args := stmt(ms[lo:hi], p.Delete)
		return ExecCount(ctx, e, c.Map.SQL(q), args)
	})
	if err != nil {
		return 0, c.errorf("ack", err)
	}
	return int(n), nil
}

// CountRows returns how many rows with these ids the table holds (see
// outbox.RowCounter), c.Chunk ids per statement.
func (c *Core) CountRows(ctx context.Context, rowIDs []int64) (int, error) {
	total := 0
	for lo := 0; lo < len(rowIDs); lo += c.Chunk {
		part := rowIDs[lo:min(lo+c.Chunk, len(rowIDs))]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		var n int
		q := "SELECT count(*) FROM " + c.Table + " WHERE id IN (" + Placeholders(len(part)) + ")"
		if err := QueryRow(ctx, c.Run, c.Map.SQL(q), args, &n); err != nil {
			return 0, c.errorf("count rows", err)
		}
		total += n
	}
	return total, nil
}

// Stats runs query, the store's Stats statement with args, which returns the
// pending rows, the oldest pending row's time (as the store reads it: age
// turns it into an age), the dead rows, the rows sent in the last minute and
// hour, and the rows of any other status.
func (c *Core) Stats(ctx context.Context, query string, args []any, age func(oldest any) (time.Duration, error)) (*outbox.Stats, error) {
	if _, err := c.Columns(ctx, c.DB); err != nil {
		return nil, c.errorf("stats", err)
	}
	var st outbox.Stats
	var oldest any
	err := QueryRow(ctx, c.Run, c.Map.SQL(query), args,
		&st.Pending, &oldest, &st.Dead, &st.SentLastMinute, &st.SentLastHour, &st.OtherStatus)
	if err == nil && oldest != nil {
		st.OldestPending, err = age(oldest)
	}
	if err != nil {
		return nil, c.errorf("stats", err)
	}
	return &st, nil
}

// Ping checks that the database can be reached.
func (c *Core) Ping(ctx context.Context) error {
	if err := c.Run.Ping(ctx); err != nil {
		return c.errorf("ping", err)
	}
	return nil
}

// Reschedule makes the retries due again at their time (see
// outbox.Store.Reschedule) with the statement c.RescheduleSQL(cols,
// p.Refund, n) of n retries, whose parameters are each retry's row id,
// attempt, time (FormatTime) and error text (ErrorText), then now where the
// dialect has NowArg. Retries run in row id order (ByRowID), in chunks (Batch).
func (c *Core) Reschedule(ctx context.Context, p outbox.RescheduleParams) error {
	rs := ByRowID(p.Retries, func(r outbox.Retry) *outbox.Message { return r.Message })
	return c.settle(ctx, "reschedule", len(rs), func(cols Columns, n int) string { return c.RescheduleSQL(cols, p.Refund, n) },
		func(i int) []any {
			r := rs[i]
			return []any{r.Message.RowID, int64(r.Message.Attempt), FormatTime(r.At), ErrorText(r.Err)}
		})
}

// Kill marks the messages dead (see outbox.Store.Kill) with the statement
// c.KillSQL(cols, n) of n messages, whose parameters are each message's row id,
// attempt and reason (ErrorText), then now where the dialect has NowArg.
// Messages run in row id order (ByRowID), in chunks (Batch).
func (c *Core) Kill(ctx context.Context, p outbox.KillParams) error {
	ds := ByRowID(p.Dead, func(d outbox.Dead) *outbox.Message { return d.Message })
	return c.settle(ctx, "kill", len(ds), c.KillSQL, func(i int) []any {
		d := ds[i]
		return []any{d.Message.RowID, int64(d.Message.Attempt), ErrorText(d.Reason)}
	})
}

// settle runs stmt(cols, n) over n messages in chunks, with args(i) the
// arguments of message i, then now where the dialect has NowArg.
func (c *Core) settle(ctx context.Context, what string, n int, stmt func(cols Columns, n int) string, args func(i int) []any) error {
	if n == 0 {
		return nil
	}
	cols, err := c.Columns(ctx, c.DB)
	if err != nil {
		return c.errorf(what, err)
	}
	_, err = c.Batch(ctx, n, func(e Execer, lo, hi int) (int64, error) {
		var all []any
		for i := lo; i < hi; i++ {
			all = append(all, args(i)...)
		}
		if c.D.NowArg != nil {
			all = append(all, c.D.NowArg())
		}
		return ExecCount(ctx, e, c.Map.SQL(stmt(cols, hi-lo)), all)
	})
	if err != nil {
		return c.errorf(what, err)
	}
	return nil
}

// ByRowID returns a copy of xs sorted by the row id of each one's message, so
// that every statement locks rows in the same order and two batches that
// overlap (a relay that lost its lease and the one that took over) cannot
// deadlock.
func ByRowID[T any](xs []T, msg func(T) *outbox.Message) []T {
	out := slices.Clone(xs)
	slices.SortStableFunc(out, func(a, b T) int { return cmp.Compare(msg(a).RowID, msg(b).RowID) })
	return out
}

// Move is what MoveRows moves.
type Move struct {
	Pick string // selects the ids of the rows to move
	Args []any  // Pick's arguments
	// Archive is the quoted archive table; "" deletes the rows instead.
	Archive string
	// Columns returns the quoted column list the archive shares with the
	// table, making sure of the archive first; it runs only when there are
	// rows to move.
	Columns func() (string, error)
}

// MoveRows moves the rows m.Pick selects from the table into m.Archive, or
// deletes them, through q (the caller's transaction), and returns how many.
func (c *Core) MoveRows(ctx context.Context, q QueryExecer, m Move) (int64, error) {
	ids, err := QueryIDs(ctx, q, c.Map.SQL(m.Pick), m.Args)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	in := " WHERE id IN (" + Placeholders(len(ids)) + ")" // the same as in Statements
	if m.Archive != "" {
		cols, err := m.Columns()
		if err != nil {
			return 0, err
		}
		copyRows := "INSERT INTO " + m.Archive + " (" + cols + ") SELECT " + cols + " FROM " + c.Table + in
		if _, err := q.ExecContext(ctx, c.Map.SQL(copyRows), ids...); err != nil {
			return 0, fmt.Errorf("copy rows: %w", err)
		}
	}
	return ExecCount(ctx, q, c.Map.SQL("DELETE FROM "+c.Table+in), ids)
}
