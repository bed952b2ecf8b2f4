package mysqlstore_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/storetest"
)

// mapping is how the tests reach a table whose columns all have other
// names (storetest.SQLMapping).
var mapping = storetest.SQLMapping[*mysqlstore.Store]{
	Harness: storetest.Harness{Runs: true, Dialect: storetest.MySQL, Time: storetest.TextTime},
	Renamed: mysqlstore.RenamedColumns(),
	Open:    openDB,
	New: func(db *sql.DB, table string, cols map[string]string) (*mysqlstore.Store, error) {
		return mysqlstore.New(db, mysqlstore.WithTable(table), mysqlstore.WithColumns(cols))
	},
	Rename: func(t *testing.T, db *sql.DB, dsn string) *sql.DB {
		var alter []string // one ALTER TABLE: the suite makes a mapped table for each of its subtests
		for c, to := range mysqlstore.RenamedColumns() {
			if c != to {
				alter = append(alter, fmt.Sprintf("RENAME COLUMN %s TO %s", c, to))
			}
		}
		_, err := db.ExecContext(t.Context(), "ALTER TABLE mapped_outbox "+strings.Join(alter, ", "))
		require.NoError(t, err)
		full, err := mysqlstore.DSN(dsn)
		require.NoError(t, err)
		return testsvc.RewritingDB(t, &mysql.MySQLDriver{}, full, func(q string) string {
			return mysqlstore.MapSQL(mysqlstore.RenamedColumns(), q)
		})
	},
}

// TestMapped runs the conformance suite and the mapping checks on a table
// whose columns all have other names, read through WithColumns.
func TestMapped(t *testing.T) { storetest.RunSQLMapping(t, mapping) }

// TestMappedMissingIndexes checks that the index advice for a mapped table
// names its columns, and that the claims find the indexes it creates.
func TestMappedMissingIndexes(t *testing.T) {
	t.Parallel()
	s, db, _ := mapping.Store(t)
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
