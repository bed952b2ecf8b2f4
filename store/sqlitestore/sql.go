package sqlitestore

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// This file holds the store's statements and its dialect: what
// store/internal/sqlcore builds differently for SQLite. The claim's
// statements are built next to the steps that run them (claim.go, runs.go,
// ordered.go); sql_test.go prepares every statement on a database file.

// dialect is SQLite's SQL for sqlcore. Times are text in timeLayout (UTC),
// compared through julianday() and written from the Store's clock.
var dialect = &sqlcore.Dialect{
	Store:         "sqlitestore",
	Quote:         '"',
	MaxIdent:      63,
	PayloadPrefix: "substr(%s, 1, %d)",
	PayloadBytes:  "length(CAST(%s AS BLOB))",
	// A retry_count that is not an integer (SQLite stores any value) counts as 0.
	DeadHead:      "c.id, CASE WHEN typeof(c.retry_count) = 'integer' THEN c.retry_count ELSE 0 END",
	UpdatedBefore: "julianday(updated_at) <= julianday(?)",
	AgeArg:        func(age time.Duration) any { return formatTime(time.Now().Add(-age)) },
	RetryDead: "UPDATE %[1]s SET status = 0, retry_count = 0, next_retry_at = NULL, updated_at = ?" +
		" WHERE id IN (SELECT id FROM %[1]s WHERE %[2]s LIMIT %[3]d)",
	DiscardDead: "DELETE FROM %[1]s WHERE id IN (SELECT id FROM %[1]s WHERE %[2]s LIMIT %[3]d)",
	NowArg:      func() any { return formatTime(time.Now()) },
	Duplicate: func(err error) bool {
		var se *sqlite.Error
		return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
	},
	// The driver parses DATETIME and TIMESTAMP columns into time.Time;
	// others hold text in one of SQLite's time formats, or unix seconds.
	TimeLayouts: []string{
		"2006-01-02 15:04:05.999999999Z07:00",
		"2006-01-02T15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999",
		"2006-01-02T15:04:05.999999999",
		"2006-01-02 15:04Z07:00",
		"2006-01-02T15:04Z07:00",
		"2006-01-02 15:04",
		"2006-01-02T15:04",
		"2006-01-02",
	},
	UnixSeconds: true,
}

// The catalog queries; their parameters are the table's name and its schema ("main" when unqualified).
const (
	columnsSQL = "SELECT name, type FROM pragma_table_info(?, ?) ORDER BY cid"
	indexesSQL = "SELECT name FROM pragma_index_list(?, ?)"
)

// statsSQL is Stats' statement on the quoted table %[1]s; ?1 is a minute
// ago, ?2 an hour ago.
const statsSQL = "SELECT" +
	" (SELECT COUNT(*) FROM %[1]s WHERE status = 0)," +
	" (SELECT MIN(julianday(created_at)) FROM %[1]s WHERE status = 0)," +
	" (SELECT COUNT(*) FROM %[1]s WHERE status = 2)," +
	" (SELECT COUNT(*) FROM %[1]s WHERE status = 1 AND julianday(updated_at) >= julianday(?1))," +
	" (SELECT COUNT(*) FROM %[1]s WHERE status = 1 AND julianday(updated_at) >= julianday(?2))," +
	" (SELECT COUNT(*) FROM %[1]s WHERE status IS NULL OR status NOT IN (0, 1, 2))"

// Archive's statements on the quoted table %[1]s and archive %[2]s.
const (
	// archivePick's parameters are the age (dialect.AgeArg) and the batch.
	archivePick = "SELECT id FROM %[1]s WHERE status = 1 AND julianday(updated_at) <= julianday(?) LIMIT ?"
	// archiveCreate's %[3]s are the column definitions.
	archiveCreate = "CREATE TABLE %[2]s (%[3]s)"
	// archiveAddColumn adds column %[3]s of declared type %[4]s (declType).
	archiveAddColumn = "ALTER TABLE %[2]s ADD COLUMN %[3]s %[4]s"
)

// payloadSizesSQL reads the sizes of the payloads a claim read in part
// (rowcheck.ReadSizes), of the table with the claimed columns sel; its %s
// is the ids' placeholders.
func payloadSizesSQL(table string, sel []string) string {
	size := dialect.PayloadSize("", sqlcore.Columns{PayloadBytes: slices.Contains(sel, sqlcore.ColPayloadBytes)})
	return "SELECT id, " + size + " FROM " + table + " WHERE id IN (%s)"
}

// The statements built for the table's columns and the batch's size.

// insertSQL is the INSERT of n rows of the columns names; ?1 is now, each
// row's values follow, numbered explicitly.
func (s *Store) insertSQL(names []string, n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + s.table.quoted() + " (" + strings.Join(names, ", ") +
		", status, retry_count, created_at, updated_at) VALUES ")
	p := 1
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for range names {
			p++
			b.WriteString("?" + strconv.Itoa(p) + ", ")
		}
		b.WriteString("0, 0, ?1, ?1)")
	}
	return b.String()
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
