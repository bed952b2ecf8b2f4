package sqlitestore_test

import (
	"database/sql"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/internal/sqltest"
	"github.com/outboxkit/outbox/store/sqlitestore"
	"github.com/outboxkit/outbox/store/storetest"
)

// renamed maps every contract column to another name.
var renamed = sqlitestore.RenamedColumns()

// mappedTable creates, in a database of the test's own, the table a
// migrated Store makes, renames its columns as renamed says, and returns
// the database and a handle on it whose statements are rewritten for the
// mapped table, as the Store rewrites its own.
func mappedTable(t *testing.T) (db, mapped *sql.DB) {
	t.Helper()
	db, dsn := openDB(t)
	s, err := sqlitestore.New(db, sqlitestore.WithTable("mapped_outbox"))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	for c, to := range renamed {
		if c != to {
			_, err = db.ExecContext(t.Context(), fmt.Sprintf("ALTER TABLE mapped_outbox RENAME COLUMN %s TO %s", c, to))
			require.NoError(t, err)
		}
	}
	full, err := sqlitestore.DSN(dsn)
	require.NoError(t, err)
	mapped = testsvc.RewritingDB(t, db.Driver(), full, func(q string) string { return sqlitestore.MapSQL(renamed, q) })
	return db, mapped
}

// mappedStore returns a Store on a mapped table (mappedTable).
func mappedStore(t *testing.T) (*sqlitestore.Store, *sql.DB, *sql.DB) {
	t.Helper()
	db, mapped := mappedTable(t)
	s, err := sqlitestore.New(db, sqlitestore.WithTable("mapped_outbox"), sqlitestore.WithColumns(renamed))
	require.NoError(t, err)
	require.NoError(t, s.CheckTable(t.Context()))
	return s, db, mapped
}

// TestStoreMappedColumns runs the conformance suite on a table whose
// columns all have other names, read through WithColumns. The suite's own
// SQL, written with the contract's names, reaches the table through a
// rewriting handle.
func TestStoreMappedColumns(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Runs:    true,
		Dialect: storetest.SQLite,
		New: func(t *testing.T) *storetest.Fixture {
			s, db, mapped := mappedStore(t)
			return &storetest.Fixture{Store: s, Write: retryBusy(sqltest.Write(db, s)), DB: mapped, Table: s.Table()}
		},
		Time: sqliteTime,
	})
}

// TestNewRefusesColumns checks the mappings New refuses, each named in the
// error, and that Migrate leaves a mapped table alone.
func TestNewRefusesColumns(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	logOnly := map[string]string{"message_id": "id", "aggregate_type": "aggregatetype", "aggregate_id": "aggregateid",
		"event_type": "type", "payload": "payload"}
	for _, tc := range []struct {
		name string
		cols map[string]string
		want string
	}{
		{"LogOnly", logOnly, "log-only mapping"},
		{"UnknownColumn", map[string]string{"colour": "c"}, `"colour" is not a column`},
		{"StateInPart", map[string]string{"message_id": "a", "aggregate_type": "b", "aggregate_id": "c",
			"event_type": "d", "payload": "e", "status": "f"}, "state columns mapped in part"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sqlitestore.New(db, sqlitestore.WithColumns(tc.cols))
			require.ErrorContains(t, err, tc.want)
		})
	}
	s, err := sqlitestore.New(db, sqlitestore.WithColumns(renamed))
	require.NoError(t, err, "a mapping of every column")
	require.ErrorContains(t, s.Migrate(t.Context()), "WithColumns", "Migrate leaves a mapped table alone")
}

// TestMappedColumnMissing checks that a mapping naming a column the table
// lacks fails CheckTable and the first claim, with the mapping and the
// table's columns in the message.
func TestMappedColumnMissing(t *testing.T) {
	t.Parallel()
	db, _ := mappedTable(t)
	cols := maps.Clone(renamed)
	cols["status"] = "ob_state" // misspelt: the table has ob_status
	s, err := sqlitestore.New(db, sqlitestore.WithTable("mapped_outbox"), sqlitestore.WithColumns(cols))
	require.NoError(t, err)
	for name, err := range map[string]error{
		"CheckTable": s.CheckTable(t.Context()),
		"Claim": func() error {
			_, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: 1, Lease: time.Minute})
			return err
		}(),
	} {
		require.ErrorContains(t, err, "status -> ob_state", name)
		require.ErrorContains(t, err, "status: ob_state", name+": the mapping")
		require.ErrorContains(t, err, "ob_retry_count, ob_status", name+": the table's columns")
	}
}
