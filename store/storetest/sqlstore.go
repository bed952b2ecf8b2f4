package storetest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
	"github.com/outboxkit/outbox/store/internal/sqltest"
)

// SQLStore is a database/sql store (mysqlstore, sqlitestore), as SQLFixture
// uses it.
type SQLStore interface {
	outbox.Store
	outbox.TxInserter[*sql.Tx]
	Table() string
}

// SQLFixture is the Fixture of s, a database/sql store on db: Write commits
// through s's Writer on db, and the suite's own SQL runs on raw (a handle
// that rewrites it for a mapped table, or db).
func SQLFixture(s SQLStore, db, raw *sql.DB) *Fixture {
	return &Fixture{Store: s, Write: sqltest.Write(db, s), DB: raw, Table: s.Table()}
}

// WriteFunc is a Fixture's Write.
type WriteFunc = func(ctx context.Context, msgs ...*outbox.Message) error

// SQLSuite is how a database/sql store, of type S with options of type O,
// runs the conformance suite ([RunSQL]).
type SQLSuite[S SQLStore, O any] struct {
	// Harness holds the suite's settings (Dialect, Runs, InvalidJSON, Time);
	// RunSQL sets its New, Chunked and ContractOnly.
	Harness Harness
	// New returns a store with opts on a migrated table of the test's own.
	New func(t *testing.T, opts ...O) (S, *sql.DB)
	// ChunkRows is the option that sets how many rows one statement covers.
	ChunkRows func(n int) O
	// ContractOnly returns a store on a table of the test's own that has
	// only the contract's columns and indexes.
	ContractOnly func(t *testing.T) (S, *sql.DB)
	// Write, when set, wraps the Write of New's fixtures.
	Write func(WriteFunc) WriteFunc
}

// RunSQL runs the conformance suite (Run) on the fixtures (SQLFixture) of
// h's stores.
func RunSQL[S SQLStore, O any](t *testing.T, h SQLSuite[S, O]) {
	t.Helper()
	suite := h.Harness
	suite.New = func(t *testing.T) *Fixture {
		s, db := h.New(t)
		f := SQLFixture(s, db, db)
		if h.Write != nil {
			f.Write = h.Write(f.Write)
		}
		return f
	}
	suite.Chunked = func(t *testing.T, rows int) *Fixture {
		s, db := h.New(t, h.ChunkRows(rows))
		return SQLFixture(s, db, db)
	}
	suite.ContractOnly = func(t *testing.T) *Fixture {
		s, db := h.ContractOnly(t)
		return SQLFixture(s, db, db)
	}
	Run(t, suite)
}

// TextTime is the Harness.Time of a store that keeps times as UTC text with
// microseconds (sqlcore.FormatTime), as mysqlstore and sqlitestore write them.
func TextTime(tm time.Time) any { return sqlcore.FormatTime(tm) }

// MappedSQLStore is a database/sql store that takes a column mapping.
type MappedSQLStore interface {
	SQLStore
	MappedStore
}

// SQLMapping is how a database/sql store's tests reach a table whose
// columns all have other names, read through the store's WithColumns
// ([RunSQLMapping]).
type SQLMapping[S MappedSQLStore] struct {
	// Harness holds the suite's settings (Dialect, Runs, Time); RunSQLMapping
	// sets its New.
	Harness Harness
	// Renamed maps every contract column to another name.
	Renamed map[string]string
	// Open opens a database of the test's own, and returns it and its DSN.
	Open func(t *testing.T) (*sql.DB, string)
	// New is the store's constructor on db's table, with the mapping cols
	// (none when empty).
	New func(db *sql.DB, table string, cols map[string]string) (S, error)
	// Rename renames the columns of db's table mapped_outbox as Renamed says
	// and returns a handle on the database at dsn whose statements are
	// rewritten for the mapped table, as the store rewrites its own.
	Rename func(t *testing.T, db *sql.DB, dsn string) *sql.DB
	// Write, when set, wraps each fixture's Write.
	Write func(WriteFunc) WriteFunc
}

// Table creates, in a database of the test's own, the table a migrated
// store makes, mapped_outbox, renames its columns (Rename), and returns the
// database and the rewriting handle on it.
func (h SQLMapping[S]) Table(t *testing.T) (db, mapped *sql.DB) {
	t.Helper()
	db, dsn := h.Open(t)
	s, err := h.New(db, "mapped_outbox", nil)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	return db, h.Rename(t, db, dsn)
}

// Store returns a store on a mapped table (Table), whose CheckTable passes.
func (h SQLMapping[S]) Store(t *testing.T) (s S, db, mapped *sql.DB) {
	t.Helper()
	db, mapped = h.Table(t)
	s, err := h.New(db, "mapped_outbox", h.Renamed)
	require.NoError(t, err)
	require.NoError(t, s.CheckTable(t.Context()))
	return s, db, mapped
}

// RunSQLMapping runs, in parallel subtests, the conformance suite on a
// mapped table (Suite: the suite's own SQL, written with the contract's
// names, reaches the table through the rewriting handle) and
// RunColumnMappings (ColumnMappings).
func RunSQLMapping[S MappedSQLStore](t *testing.T, h SQLMapping[S]) {
	t.Helper()
	t.Run("Suite", func(t *testing.T) {
		t.Parallel()
		suite := h.Harness
		suite.New = func(t *testing.T) *Fixture {
			s, db, mapped := h.Store(t)
			f := SQLFixture(s, db, mapped)
			if h.Write != nil {
				f.Write = h.Write(f.Write)
			}
			return f
		}
		Run(t, suite)
	})
	t.Run("ColumnMappings", func(t *testing.T) {
		t.Parallel()
		RunColumnMappings(t, ColumnsHarness{
			Renamed: h.Renamed,
			New: func(t *testing.T) func(cols map[string]string) (MappedStore, error) {
				db, _ := h.Open(t)
				return func(cols map[string]string) (MappedStore, error) { return h.New(db, "outbox_message", cols) }
			},
			Mapped: func(t *testing.T, cols map[string]string) (MappedStore, error) {
				db, _ := h.Table(t)
				return h.New(db, "mapped_outbox", cols)
			},
		})
	})
}

// SQLIndexStore is a database/sql store that advises indexes and migrates.
type SQLIndexStore interface {
	outbox.IndexChecker
	Migrate(ctx context.Context) error
}

// CheckSQLMissingIndexes runs CheckMissingIndexes, expecting 2 indexes, on
// db: on the table legacy that ddl creates with only the contract's indexes,
// and on a migrated table outbox_message. newStore is the store's New on
// db's table.
func CheckSQLMissingIndexes[S SQLIndexStore](t *testing.T, db *sql.DB, ddl string, newStore func(table string) (S, error)) {
	t.Helper()
	ctx := t.Context()
	_, err := db.ExecContext(ctx, ddl)
	require.NoError(t, err)
	s, err := newStore("legacy")
	require.NoError(t, err)
	migrated, err := newStore("outbox_message")
	require.NoError(t, err)
	require.NoError(t, migrated.Migrate(ctx))
	CheckMissingIndexes(t, s, migrated, func(sql string) {
		_, err := db.ExecContext(ctx, sql)
		require.NoError(t, err)
	}, 2)
}
