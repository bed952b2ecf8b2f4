package sqlitestore

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// DriverName is the database/sql driver the Store is built and tested on
// (modernc.org/sqlite, pure Go), registered by importing this package.
const DriverName = "sqlite"

// BusyTimeoutMillis is how long, in milliseconds, a connection opened by
// [Open] waits for another writer to finish before it reports SQLITE_BUSY.
const BusyTimeoutMillis = 5000

// DSN returns the modernc.org/sqlite data source name for the database file
// at path with the settings the Store is built for, applied to every pooled
// connection through the DSN's _pragma parameters:
//
//   - journal_mode=WAL: readers never block the writer, nor the writer readers;
//   - synchronous=FULL: a committed transaction survives power loss;
//   - busy_timeout=5000: a writer waits up to 5 s for the lock instead of failing;
//   - foreign_keys=ON, for the caller's own tables;
//   - _txlock=immediate: every read-write transaction begins with BEGIN
//     IMMEDIATE, taking the write lock at once, so that transactions that
//     read before they write (the caller's business transactions) wait for
//     the lock instead of failing with SQLITE_BUSY when they upgrade.
//     Transactions begun with sql.TxOptions{ReadOnly: true} stay deferred.
//
// It returns an error for an empty path and for ":memory:", which would give
// every pooled connection a database of its own.
func DSN(path string) (string, error) {
	switch {
	case path == "":
		return "", errors.New("sqlitestore: empty database path")
	case path == ":memory:" || strings.HasPrefix(path, "file::memory:"):
		return "", errors.New("sqlitestore: an in-memory database is per connection; use a file (t.TempDir() in tests)")
	}
	params := []string{
		fmt.Sprintf("_pragma=busy_timeout(%d)", BusyTimeoutMillis),
		"_pragma=journal_mode(WAL)",
		"_pragma=synchronous(FULL)",
		"_pragma=foreign_keys(ON)",
		"_txlock=immediate",
	}
	return "file:" + escapePath(path) + "?" + strings.Join(params, "&"), nil
}

// escapePath percent-encodes the characters that end or escape the path part
// of a SQLite URI filename.
func escapePath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(p)
}

// Open opens (creating if need be) the SQLite database file at path with the
// settings of [DSN]. The caller owns the returned *sql.DB and closes it; the
// Store never does. Open does not create the outbox table: see [Store.Migrate].
func Open(path string) (*sql.DB, error) {
	dsn, err := DSN(path)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(DriverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	// Open is lazy; reach the file now so that a bad path fails here.
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	return db, nil
}
