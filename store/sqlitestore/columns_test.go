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

// mapping is how the tests reach a table whose columns all have other
// names (storetest.SQLMapping).
var mapping = storetest.SQLMapping[*sqlitestore.Store]{
	Harness: storetest.Harness{Runs: true, Dialect: storetest.SQLite, Time: storetest.TextTime},
	Renamed: sqlitestore.RenamedColumns(),
	Open:    openDB,
	New: func(db *sql.DB, table string, cols map[string]string) (*sqlitestore.Store, error) {
		return sqlitestore.New(db, sqlitestore.WithTable(table), sqlitestore.WithColumns(cols))
	},
	Rename: func(t *testing.T, db *sql.DB, path string) *sql.DB {
		sqltest.RenameColumns(t, db, "mapped_outbox", sqlitestore.RenamedColumns())
		full, err := sqlitestore.DSN(path)
		require.NoError(t, err)
		return testsvc.RewritingDB(t, db.Driver(), full, func(q string) string {
			return sqlitestore.MapSQL(sqlitestore.RenamedColumns(), q)
		})
	},
	Write: retryBusy,
}

// TestMapped runs the conformance suite and the mapping checks on a table
// whose columns all have other names, read through WithColumns.
func TestMapped(t *testing.T) { storetest.RunSQLMapping(t, mapping) }
