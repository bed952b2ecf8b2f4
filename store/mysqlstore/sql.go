package mysqlstore

import (
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// This file holds the store's statements and its dialect: what
// store/internal/sqlcore builds differently for MySQL and MariaDB. The claim's
// statements are built next to the steps that run them (claim.go, runs.go,
// ordered.go); sql_test.go prepares every statement on the server.

// dialect is MySQL's and MariaDB's SQL for sqlcore. Times are DATETIME(6)
// in UTC, compared with UTC_TIMESTAMP(6).
var dialect = &sqlcore.Dialect{
	Store:         "mysqlstore",
	Quote:         '`',
	MaxIdent:      64,
	PayloadPrefix: "LEFT(%s, %d)",
	PayloadBytes:  "LENGTH(%s)",
	DeadHead:      "c.id, COALESCE(c.retry_count, 0)",
	UpdatedBefore: "updated_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND",
	AgeArg:        func(age time.Duration) any { return age.Microseconds() },
	// MySQL refuses LIMIT in an IN subquery, and takes it on UPDATE and DELETE.
	RetryDead: "UPDATE %[1]s SET status = 0, retry_count = 0, next_retry_at = NULL, updated_at = UTC_TIMESTAMP(6)" +
		" WHERE %[2]s ORDER BY id LIMIT %[3]d",
	DiscardDead: "DELETE FROM %[1]s WHERE %[2]s ORDER BY id LIMIT %[3]d",
	Duplicate:   func(err error) bool { return isMySQLError(err, errDupEntry) },
	// With parseTime=true (DSN) the driver returns DATETIMEs as time.Time in
	// the DSN's loc; the Store writes them in UTC. Without it, text.
	TimeLayouts:  []string{"2006-01-02 15:04:05.999999999", "2006-01-02"},
	WallClockUTC: true,
}

// The catalog queries; their parameters are the table's database (NULL for
// the current one) and its name.
const (
	columnsSQL = `SELECT column_name, column_type FROM information_schema.columns
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? ORDER BY ordinal_position`
	indexesSQL = `SELECT index_name, seq_in_index, column_name FROM information_schema.statistics
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND seq_in_index <= 3`
	primaryKeySQL = `SELECT column_name FROM information_schema.statistics
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND index_name = 'PRIMARY' AND seq_in_index = 1`
	// databaseSQL names the database a table without one is in; NULL when none is selected.
	databaseSQL = "SELECT COALESCE(?, DATABASE())"
)

// statsSQL is Stats' statement on the quoted table %[1]s.
const statsSQL = "SELECT" +
	" (SELECT COUNT(*) FROM %[1]s WHERE status = 0)," +
	// A zero date (MariaDB keeps one where sql_mode allows it) would make the age NULL.
	" (SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) FROM %[1]s WHERE status = 0 AND created_at >= '0001-01-01')," +
	" (SELECT COUNT(*) FROM %[1]s WHERE status = 2)," +
	" (SELECT COUNT(*) FROM %[1]s WHERE status = 1 AND updated_at >= UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE)," +
	" (SELECT COUNT(*) FROM %[1]s WHERE status = 1 AND updated_at >= UTC_TIMESTAMP(6) - INTERVAL 1 HOUR)," +
	" (SELECT COUNT(*) FROM %[1]s WHERE status IS NULL OR status < 0 OR status > 2)"

// Archive's statements on the quoted table %[1]s and archive %[2]s; ? is
// the age (dialect.AgeArg), then the batch.
const (
	archiveOld    = " WHERE status = 1 AND updated_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"
	archiveAnySQL = "SELECT EXISTS (SELECT 1 FROM %[1]s" + archiveOld + ")"
	archivePick   = "SELECT id FROM %[1]s" + archiveOld + " LIMIT ? FOR UPDATE SKIP LOCKED"
	archiveCreate = "CREATE TABLE IF NOT EXISTS %[2]s LIKE %[1]s"
	// archiveAddColumn adds column %[3]s of type %[4]s (from
	// information_schema of the live table, never from a caller).
	archiveAddColumn = "ALTER TABLE %[2]s ADD COLUMN %[3]s %[4]s NULL"
)

// payloadSizesSQL reads the sizes of the payloads a claim read in part
// (rowcheck.ReadSizes), of the table with the claimed columns sel; its %s
// is the ids' placeholders.
func payloadSizesSQL(table string, sel []string) string {
	size := dialect.PayloadSize("", sqlcore.Columns{PayloadBytes: slices.Contains(sel, sqlcore.ColPayloadBytes)})
	return "SELECT id, " + size + " FROM " + table + " WHERE id IN (%s)"
}

// lockNameSQL is the GET_LOCK name of a table's migrations, from the
// arguments (database or NULL for the current one, table): unique to the
// table on the server, and at most 64 characters as MySQL requires.
const lockNameSQL = "CONCAT('outbox_migrate_', LEFT(SHA2(CONCAT(COALESCE(?, DATABASE()), '.', ?), 256), 40))"

// Migrate's lock: the lock name's arguments, then (to take it) the seconds to wait.
const (
	migrateLockSQL   = "SELECT GET_LOCK(" + lockNameSQL + ", ?)"
	migrateUnlockSQL = "SELECT RELEASE_LOCK(" + lockNameSQL + ")"
)

// The statements built for the table's columns and the batch's size.

// insertSQL is the INSERT of n rows of the columns names; its parameters
// are each row's values.
func (s *Store) insertSQL(names []string, n int) string {
	row := "(" + sqlcore.Placeholders(len(names)) + ", 0, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"
	return "INSERT INTO " + s.table.quoted() + " (" + strings.Join(names, ", ") +
		", status, retry_count, created_at, updated_at) VALUES " + strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}

// fence is the join condition Reschedule and Kill share (with WHERE o.status
// = 0): the row is still pending and its retry_count is still the attempt
// the claim handed out. Ack says the same with an IN list (ackMatch).
const fence = "o.id = a.id AND o.retry_count = a.attempt"

// ackSQL returns the statement that acknowledges ms (not empty), and its arguments.
func (s *Store) ackSQL(info tableInfo, del bool, ms []*outbox.Message) (string, []any) {
	from := s.table.quoted() + " AS o"
	if info.pkID {
		from += " FORCE INDEX (PRIMARY)"
	}
	match, args := ackMatch(ms)
	if del {
		return "DELETE o FROM " + from + " WHERE o.status = 0 AND " + match, args
	}
	return "UPDATE " + from + " SET o.status = 1, o.updated_at = UTC_TIMESTAMP(6) WHERE o.status = 0 AND " + match, args
}

// ackMatch returns the condition that matches each of ms by id and attempt
// (on the table as "o"), and its arguments. ms is not empty.
//
// A derived table of (id, attempt) pairs made of UNION ALL SELECTs costs
// the server a parse and plan of one SELECT per message: on MariaDB 10.11,
// acknowledging 1,000 rows that way took about 16 ms of the server's CPU,
// and with the id list about 11 ms; the (id, retry_count) list falls between.
func ackMatch(ms []*outbox.Message) (string, []any) {
	attempt := ms[0].Attempt
	same := true
	for _, m := range ms[1:] {
		if m.Attempt != attempt {
			same = false
			break
		}
	}
	if same {
		args := make([]any, 0, len(ms)+1)
		args = append(args, int64(attempt))
		for _, m := range ms {
			args = append(args, m.RowID)
		}
		return "o.retry_count = ? AND o.id IN (" + sqlcore.Placeholders(len(ms)) + ")", args
	}
	args := make([]any, 0, 2*len(ms))
	for _, m := range ms {
		args = append(args, m.RowID, int64(m.Attempt))
	}
	return "(o.id, o.retry_count) IN (" + sqlcore.Tuples(len(ms), 2) + ")", args
}

// rescheduleSQL is the statement that reschedules n messages; its
// parameters are each message's id, attempt, time and error text.
func (s *Store) rescheduleSQL(cols sqlcore.Columns, refund bool, n int) string {
	a := derived(n, "CAST(? AS SIGNED) AS id", "CAST(? AS SIGNED) AS attempt",
		"CAST(? AS DATETIME(6)) AS at", "CAST(? AS CHAR) AS err")
	set := "o.next_retry_at = a.at, o.updated_at = UTC_TIMESTAMP(6)"
	if refund {
		set += ", o.retry_count = a.attempt - 1"
	}
	if cols.LastError {
		set += ", o.last_error = a.err"
	}
	return "UPDATE " + s.table.quoted() + " AS o JOIN " + a + " ON " + fence + " SET " + set + " WHERE o.status = 0"
}

// killSQL is the statement that kills n messages; its parameters are each
// message's id, attempt and reason.
func (s *Store) killSQL(cols sqlcore.Columns, n int) string {
	a := derived(n, "CAST(? AS SIGNED) AS id", "CAST(? AS SIGNED) AS attempt", "CAST(? AS CHAR) AS err")
	set := "o.status = 2, o.updated_at = UTC_TIMESTAMP(6)"
	if cols.LastError {
		set += ", o.last_error = a.err"
	}
	return "UPDATE " + s.table.quoted() + " AS o JOIN " + a + " ON " + fence + " SET " + set + " WHERE o.status = 0"
}

// derived returns a derived table "a" of n rows whose columns are typed by
// the first row's expressions, e.g. (SELECT CAST(? AS SIGNED) AS id UNION
// ALL SELECT ?) AS a. It works on MySQL 8 and MariaDB alike, which spell
// table value constructors differently.
func derived(n int, first ...string) string {
	var b strings.Builder
	b.WriteString("(SELECT " + strings.Join(first, ", "))
	rest := " UNION ALL SELECT " + sqlcore.Placeholders(len(first))
	for range n - 1 {
		b.WriteString(rest)
	}
	b.WriteString(") AS a")
	return b.String()
}
