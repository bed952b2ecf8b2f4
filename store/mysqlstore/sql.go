package mysqlstore

import (
	"time"

	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// This file holds the store's fixed statements and its dialect: what
// store/internal/sqlcore builds differently for MySQL and MariaDB. The
// statements that depend on the table's columns and indexes are built next
// to their use (claim.go, mark.go, runs.go, ordered.go); sql_test.go
// prepares every one of them on the server.

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
// (rowcheck.ReadSizes); %%s is the ids' placeholders.
const payloadSizesSQL = "SELECT id, LENGTH(payload) FROM %s WHERE id IN (%%s)"

// lockNameSQL is the GET_LOCK name of a table's migrations, from the
// arguments (database or NULL for the current one, table): unique to the
// table on the server, and at most 64 characters as MySQL requires.
const lockNameSQL = "CONCAT('outbox_migrate_', LEFT(SHA2(CONCAT(COALESCE(?, DATABASE()), '.', ?), 256), 40))"

// Migrate's lock: the lock name's arguments, then (to take it) the seconds to wait.
const (
	migrateLockSQL   = "SELECT GET_LOCK(" + lockNameSQL + ", ?)"
	migrateUnlockSQL = "SELECT RELEASE_LOCK(" + lockNameSQL + ")"
)
