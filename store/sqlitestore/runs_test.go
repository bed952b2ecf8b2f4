package sqlitestore

import (
	"database/sql"
	"testing"

	"github.com/outboxkit/outbox/store/internal/sqltest"
)

// contractStore returns a Store on a database file of the test's own, on a
// table with only the contract's columns and indexes.
func contractStore(t *testing.T) (*Store, *sql.DB) {
	t.Helper()
	return sqltest.OnTable(t, New, testDB(t), `CREATE TABLE outbox_message (
		id INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT NOT NULL UNIQUE, aggregate_type TEXT NOT NULL,
		aggregate_id TEXT NOT NULL, event_type TEXT NOT NULL, payload TEXT NOT NULL, status INTEGER NOT NULL DEFAULT 0,
		retry_count INTEGER NOT NULL DEFAULT 0, next_retry_at TEXT, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
		updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP);
	CREATE INDEX outbox_status ON outbox_message (status, next_retry_at);
	CREATE INDEX outbox_aggregate ON outbox_message (aggregate_type, aggregate_id)`)
}

// TestRunsClaim checks what ends a run (sqltest.RunsClaim). (SQLite has one
// writer: no claim runs while another holds rows locked.)
func TestRunsClaim(t *testing.T) {
	t.Parallel()
	sqltest.RunsClaim(t, orderedStore, contractStore)
}

// TestRunsLeaveRoomForOthers: see sqltest.RunsLeaveRoomForOthers.
func TestRunsLeaveRoomForOthers(t *testing.T) {
	t.Parallel()
	sqltest.RunsLeaveRoomForOthers(t, orderedStore, contractStore)
}

// TestRunsClaimConcurrent: see sqltest.RunsConcurrent. The writers' own
// transactions meet the claims at SQLite's lock, under busy_timeout; on a
// loaded machine they may wait it out, and try again.
func TestRunsClaimConcurrent(t *testing.T) {
	t.Parallel()
	sqltest.RunsConcurrent(t, orderedStore, contractStore, isBusy)
}
