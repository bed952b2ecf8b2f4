package mysqlstore_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/internal/sqltest"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/storetest"
)

// renamed maps every contract column to another name.
var renamed = mysqlstore.RenamedColumns()

// mappedTable creates, in a database of the test's own, the table a
// migrated Store makes, renames its columns as renamed says, and returns
// the database and a handle on it whose statements are rewritten for the
// mapped table, as the Store rewrites its own.
func mappedTable(t *testing.T) (db, mapped *sql.DB) {
	t.Helper()
	db, dsn := openDB(t)
	s, err := mysqlstore.New(db, mysqlstore.WithTable("mapped_outbox"))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	var alter []string // one ALTER TABLE: the suite makes a mapped table for each of its subtests
	for c, to := range renamed {
		if c != to {
			alter = append(alter, fmt.Sprintf("RENAME COLUMN %s TO %s", c, to))
		}
	}
	_, err = db.ExecContext(t.Context(), "ALTER TABLE mapped_outbox "+strings.Join(alter, ", "))
	require.NoError(t, err)
	full, err := mysqlstore.DSN(dsn)
	require.NoError(t, err)
	mapped = testsvc.RewritingDB(t, &mysql.MySQLDriver{}, full, func(q string) string { return mysqlstore.MapSQL(renamed, q) })
	return db, mapped
}

// mappedStore returns a Store on a mapped table (mappedTable).
func mappedStore(t *testing.T) (*mysqlstore.Store, *sql.DB, *sql.DB) {
	t.Helper()
	db, mapped := mappedTable(t)
	s, err := mysqlstore.New(db, mysqlstore.WithTable("mapped_outbox"), mysqlstore.WithColumns(renamed))
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
		Dialect: storetest.MySQL,
		New: func(t *testing.T) *storetest.Fixture {
			s, db, mapped := mappedStore(t)
			return &storetest.Fixture{Store: s, Write: sqltest.Write(db, s), DB: mapped, Table: s.Table()}
		},
		Time: mysqlTime,
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
				return mysqlstore.New(db, mysqlstore.WithColumns(cols))
			}
		},
		Mapped: func(t *testing.T, cols map[string]string) (storetest.MappedStore, error) {
			db, _ := mappedTable(t)
			return mysqlstore.New(db, mysqlstore.WithTable("mapped_outbox"), mysqlstore.WithColumns(cols))
		},
	})
}

// TestMappedMissingIndexes checks that the index advice for a mapped table
// names its columns, and that the claims find the indexes it creates.
func TestMappedMissingIndexes(t *testing.T) {
	t.Parallel()
	s, db, _ := mappedStore(t)
	missing, err := s.MissingIndexes(t.Context())
	require.NoError(t, err)
	require.Empty(t, missing, "Migrate's indexes, on the renamed columns")
	_, err = db.ExecContext(t.Context(), "DROP INDEX idx_status_id ON mapped_outbox")
	require.NoError(t, err)
	_, err = db.ExecContext(t.Context(), "DROP INDEX idx_status_aggregate ON mapped_outbox")
	require.NoError(t, err)
	missing, err = s.MissingIndexes(t.Context())
	require.NoError(t, err)
	require.Len(t, missing, 2)
	for _, p := range missing {
		require.Contains(t, p.Fix, "`ob_status`")
		_, err := db.ExecContext(t.Context(), p.Fix)
		require.NoError(t, err)
	}
	missing, err = s.MissingIndexes(t.Context())
	require.NoError(t, err)
	require.Empty(t, missing)
}
