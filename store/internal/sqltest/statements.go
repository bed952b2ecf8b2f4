package sqltest

import (
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// Shape is a table that a store's statements depend on, and how to open a
// store on it.
type Shape[S any] struct {
	Name string
	Open func(*testing.T) (S, *sql.DB)
}

// Statements is how a store shows [StatementsGolden] and
// [StatementsPrepare] the statements it builds.
type Statements[S any] struct {
	// Shapes are the tables the statements depend on; the first is the
	// migrated table outbox_message.
	Shapes []Shape[S]
	// Of returns, by name, the statements sqlcore builds for s's table on
	// db and those s builds itself, with the contract's column names.
	Of func(t *testing.T, s S, db *sql.DB) (core, own map[string]string)
	// SQL returns stmt as s runs it (with its column mapping).
	SQL func(s S, stmt string) string
	// Archive makes s's archive table, so that the statements on it prepare.
	Archive func(t *testing.T, s S, db *sql.DB)
	// Mapped returns a Store on db's table outbox_message with the mapping cols.
	Mapped func(db *sql.DB, cols map[string]string) (S, error)
	// Renamed maps every contract column to another name.
	Renamed map[string]string
	// Golden compares got with the package's testdata/name.
	Golden func(t *testing.T, name, got string)
}

// dump lists every statement of s, by name, as s runs them.
func (h Statements[S]) dump(t *testing.T, s S, db *sql.DB) string {
	t.Helper()
	stmts, own := h.Of(t, s, db)
	maps.Copy(stmts, own)
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(stmts)) {
		fmt.Fprintf(&b, "-- %s\n%s\n\n", name, h.SQL(s, stmts[name]))
	}
	return b.String()
}

// RunStatements runs StatementsGolden and StatementsPrepare on h, as the
// parallel subtests Golden and Prepare.
func RunStatements[S any](t *testing.T, h Statements[S]) {
	t.Helper()
	t.Run("Golden", func(t *testing.T) {
		t.Parallel()
		StatementsGolden(t, h)
	})
	t.Run("Prepare", func(t *testing.T) {
		t.Parallel()
		StatementsPrepare(t, h)
	})
}

// StatementsGolden checks, in parallel subtests, every statement a Store
// without a mapping builds for the migrated table against statements.golden
// (written before WithColumns came: byte for byte what the Store ran
// before), and every statement a Store with the mapping Renamed builds, on
// the table renamed so, against statements_mapped.golden: those of
// statements.golden with the table's quoted columns.
func StatementsGolden[S any](t *testing.T, h Statements[S]) {
	t.Helper()
	t.Run("Contract", func(t *testing.T) {
		t.Parallel()
		s, db := h.Shapes[0].Open(t)
		h.Golden(t, "statements.golden", h.dump(t, s, db))
	})
	t.Run("Mapped", func(t *testing.T) {
		t.Parallel()
		_, db := h.Shapes[0].Open(t)
		RenameColumns(t, db, "outbox_message", h.Renamed)
		s, err := h.Mapped(db, h.Renamed)
		require.NoError(t, err)
		h.Golden(t, "statements_mapped.golden", h.dump(t, s, db))
	})
}

// StatementsPrepare prepares, on the database, every statement the Store
// builds, for each shape of table its statements depend on, in parallel
// subtests: a statement that does not parse, or names a column or index
// the table lacks, fails here rather than in the first claim that runs it.
func StatementsPrepare[S any](t *testing.T, h Statements[S]) {
	t.Helper()
	for _, c := range h.Shapes {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			s, db := c.Open(t)
			h.Archive(t, s, db)
			core, own := h.Of(t, s, db)
			require.NoError(t, sqlcore.Prepare(t.Context(), db, core, own))
		})
	}
}
