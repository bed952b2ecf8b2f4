package sqlitestore_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

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
	sqltest.RenameColumns(t, db, "mapped_outbox", renamed)
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

// TestColumnMappings checks the mappings New refuses and a mapped column
// the table lacks (storetest.RunColumnMappings).
func TestColumnMappings(t *testing.T) {
	t.Parallel()
	storetest.RunColumnMappings(t, storetest.ColumnsHarness{
		Renamed: renamed,
		New: func(t *testing.T) func(cols map[string]string) (storetest.MappedStore, error) {
			db, _ := openDB(t)
			return func(cols map[string]string) (storetest.MappedStore, error) {
				return sqlitestore.New(db, sqlitestore.WithColumns(cols))
			}
		},
		Mapped: func(t *testing.T, cols map[string]string) (storetest.MappedStore, error) {
			db, _ := mappedTable(t)
			return sqlitestore.New(db, sqlitestore.WithTable("mapped_outbox"), sqlitestore.WithColumns(cols))
		},
	})
}
