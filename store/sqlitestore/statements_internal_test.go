package sqlitestore

import (
	"database/sql"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testsvc"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden")

// dumpStatements lists every statement the Store builds for a migrated
// table (its own and sqlcore's), by name, as it runs them.
func dumpStatements(t *testing.T, s *Store, db *sql.DB) string {
	t.Helper()
	cols, err := s.columns(t.Context(), db)
	require.NoError(t, err)
	stmts, err := s.core.Statements(cols.Columns, s.archiveTable().quoted())
	require.NoError(t, err)
	maps.Copy(stmts, s.statements(cols))
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(stmts)) {
		fmt.Fprintf(&b, "-- %s\n%s\n\n", name, s.sql(stmts[name]))
	}
	return b.String()
}

// TestStatementsGolden checks every statement a Store without a mapping
// builds against statements.golden, written before WithColumns came: byte
// for byte what the Store ran before.
func TestStatementsGolden(t *testing.T) {
	t.Parallel()
	s, db := orderedStore(t)
	testsvc.Golden(t, "statements.golden", dumpStatements(t, s, db), *updateGolden)
}

// TestStatementsGoldenMapped checks every statement a Store with
// WithColumns(RenamedColumns()) builds, on a table renamed so, against
// statements_mapped.golden: those of statements.golden with the table's
// quoted columns.
func TestStatementsGoldenMapped(t *testing.T) {
	t.Parallel()
	_, db := orderedStore(t)
	cols := RenamedColumns()
	for c, to := range cols {
		if c != to {
			_, err := db.ExecContext(t.Context(), fmt.Sprintf("ALTER TABLE outbox_message RENAME COLUMN %s TO %s", c, to))
			require.NoError(t, err)
		}
	}
	s, err := New(db, WithColumns(cols))
	require.NoError(t, err)
	testsvc.Golden(t, "statements_mapped.golden", dumpStatements(t, s, db), *updateGolden)
}
