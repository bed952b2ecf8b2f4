// Package sqlcore holds what the stores do alike: reading claimed and dead
// rows, the dead-letter admin, archive batches, statements run in chunks,
// table names, and the clean-up of error texts. What differs between their
// databases is described by a [Dialect], which each store defines once,
// next to its statements.
//
// The database/sql stores (mysqlstore, sqlitestore) use all of it. pgstore
// keeps its hot paths (writes, claims, settling) on pgx and runs the rest
// (the dead-letter admin, Stats, CountRows, Ping) through an [Admin] on a
// [Runner] of its pool.
package sqlcore

import (
	"context"
	"database/sql"
	"strings"
	"time"
	"unicode/utf8"
)

// Dialect is what differs between the databases in the statements this
// package builds and in how their drivers hand back values. Each store has
// one, built once.
type Dialect struct {
	// Store is the store's package name, which starts its errors ("mysqlstore").
	Store string
	// Quote quotes identifiers: '`' (MySQL) or '"' (SQLite).
	Quote byte
	// MaxIdent is the longest identifier a table name part may be.
	MaxIdent int
	// PayloadPrefix reads the first n characters of a column: a format with
	// %s the column and %d n ("LEFT(%s, %d)").
	PayloadPrefix string
	// PayloadBytes is a column's size in bytes, as a 64-bit integer: a
	// format with %s the column ("LENGTH(%s)").
	PayloadBytes string
	// Casts are what a column read as a message's column (ClaimColumns,
	// PayloadSize) is cast with, by name ("::text"); nil casts none.
	Casts map[string]string
	// ErrorContains is the condition "last_error contains ?"; "" is
	// "INSTR(last_error, ?) > 0".
	ErrorContains string
	// DeadHead selects a dead row's id and its attempts (retry_count as an
	// integer, 0 where it is not one) from the table aliased c.
	DeadHead string
	// UpdatedBefore is the condition "updated_at is at least an age ago";
	// its one parameter is AgeArg(age).
	UpdatedBefore string
	// AgeArg is the argument of UpdatedBefore for an age.
	AgeArg func(time.Duration) any
	// RetryDead and DiscardDead change one batch of dead rows: formats with
	// %[1]s the quoted table, %[2]s the condition on the rows (with its
	// parameters) and %[3]d the batch.
	RetryDead, DiscardDead string
	// NowArg, when set, is the argument of the "?" in RetryDead that stands
	// for now, before the condition's.
	NowArg func() any
	// Duplicate reports whether err is the database's unique violation.
	Duplicate func(error) bool
	// TimeLayouts are the text forms in which the driver may hand back a
	// timestamp (ParseTime).
	TimeLayouts []string
	// WallClockUTC says that the driver's time.Time values carry the
	// column's wall clock, which is UTC, in whatever location it put them.
	WallClockUTC bool
	// UnixSeconds says that an integer timestamp is in seconds since 1970.
	UnixSeconds bool
}

// TimeLayout is how the stores write times: UTC, with microseconds. Text in
// this form sorts in time order; MySQL reads it as a DATETIME (a column
// without a fraction keeps the seconds), and SQLite's date functions read it.
const TimeLayout = "2006-01-02 15:04:05.000000"

// FormatTime is t as the stores write it (TimeLayout).
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// Ident quotes one identifier.
func (d *Dialect) Ident(s string) string {
	q := string(d.Quote)
	return q + strings.ReplaceAll(s, q, q+q) + q
}

// Qualified is a table as it goes into SQL: its name, after its schema
// ("" for the connection's default one).
func (d *Dialect) Qualified(schema, name string) string {
	if schema == "" {
		return d.Ident(name)
	}
	return d.Ident(schema) + "." + d.Ident(name)
}

// ContractColumns are the columns every outbox table has (shared/DESIGN.md).
var ContractColumns = []string{
	"id", "message_id", "aggregate_type", "aggregate_id", "event_type", "payload",
	"status", "retry_count", "next_retry_at", "created_at", "updated_at",
}

// MaxErrorLength is the most bytes of an error or reason a store keeps in
// last_error.
const MaxErrorLength = 4096

// PGText is [ErrorText] for PostgreSQL, whose text columns refuse NUL bytes
// as well as invalid UTF-8: pgstore and pgcdc store last_error through it.
func PGText(s string) string { return ErrorText(strings.ReplaceAll(s, "\x00", "")) }

// ErrorText makes an error text fit for last_error: valid UTF-8 (a strict
// utf8mb4 or PostgreSQL text column refuses anything else, failing the whole
// batch), at most MaxErrorLength bytes, cut at a character boundary.
func ErrorText(s string) string {
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

// Scanner reads the current row: a *sql.Rows, or pgx's Rows.
type Scanner interface{ Scan(dest ...any) error }

// Runner runs the statements of the methods that need no transaction
// (ListDead, RetryDead, DiscardDead, CountRows, Stats and Ping): a *sql.DB
// through SQLRunner, or a store's own pool. Their parameters are "?".
type Runner interface {
	// Query runs query and calls row with each row it returns, in order.
	Query(ctx context.Context, query string, args []any, row func(Scanner) error) error
	// Exec runs query and returns how many rows it changed.
	Exec(ctx context.Context, query string, args []any) (int64, error)
	// Ping checks that the database can be reached.
	Ping(ctx context.Context) error
}

// SQLRunner is the Runner of a *sql.DB.
type SQLRunner struct{ DB *sql.DB }

// Query runs query and calls row with each row it returns.
func (r SQLRunner) Query(ctx context.Context, query string, args []any, row func(Scanner) error) error {
	rows, err := r.DB.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return Each(rows, row)
}

// Rows are the rows of a query: a *sql.Rows, or pgx's Rows.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// Each calls row with each of rows, in order, and returns the first error.
func Each(rows Rows, row func(Scanner) error) error {
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Exec runs query and returns how many rows it changed.
func (r SQLRunner) Exec(ctx context.Context, query string, args []any) (int64, error) {
	return ExecCount(ctx, r.DB, query, args)
}

// Ping checks that the database can be reached.
func (r SQLRunner) Ping(ctx context.Context) error { return r.DB.PingContext(ctx) }

// QueryRow runs query through r and scans its first row into dest;
// sql.ErrNoRows when it returns none.
func QueryRow(ctx context.Context, r Runner, query string, args []any, dest ...any) error {
	found := false
	err := r.Query(ctx, query, args, func(s Scanner) error {
		if found {
			return nil
		}
		found = true
		return s.Scan(dest...)
	})
	if err == nil && !found {
		err = sql.ErrNoRows
	}
	return err
}

// Queryer is a *sql.DB, *sql.Conn or *sql.Tx.
type Queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Execer is a *sql.DB, *sql.Conn or *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// QueryExecer is a *sql.DB, *sql.Conn or *sql.Tx.
type QueryExecer interface {
	Queryer
	Execer
}

// ExecCount runs q and returns how many rows it changed.
func ExecCount(ctx context.Context, e Execer, q string, args []any) (int64, error) {
	res, err := e.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueryIDs runs query and returns the ids (its one column) it selects.
func QueryIDs(ctx context.Context, q Queryer, query string, args []any) ([]any, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []any
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// Placeholders returns n comma-separated question marks.
func Placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// Tuples returns n comma-separated groups of width placeholders: (?, ?), (?, ?).
func Tuples(n, width int) string {
	one := "(" + Placeholders(width) + ")"
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
