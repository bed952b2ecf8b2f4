package sqlitestore

import (
	"errors"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// This file holds the store's fixed statements and its dialect: what
// store/internal/sqlcore builds differently for SQLite. The statements that
// depend on the table's columns and indexes are built next to their use
// (claim.go, mark.go, runs.go, ordered.go); sql_test.go prepares every one
// of them on a database file.

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
// (rowcheck.ReadSizes); %%s is the ids' placeholders.
const payloadSizesSQL = "SELECT id, length(CAST(payload AS BLOB)) FROM %s WHERE id IN (%%s)"
