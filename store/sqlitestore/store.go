package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// DefaultTable is the table a Store uses unless [WithTable] says otherwise.
const DefaultTable = "outbox_message"

// Compile-time checks that Store implements the interfaces the relay and the
// Writer look for.
var (
	_ outbox.Store               = (*Store)(nil)
	_ outbox.Migrator            = (*Store)(nil)
	_ outbox.Pinger              = (*Store)(nil)
	_ outbox.RowCounter          = (*Store)(nil)
	_ outbox.TxInserter[*sql.Tx] = (*Store)(nil)
)

// Store is an [outbox.Store] on a SQLite database through database/sql and
// the modernc.org/sqlite driver. It wraps a *sql.DB the caller opened
// (preferably with [Open]) and never closes it. It also implements
// [outbox.Migrator], [outbox.Pinger], [outbox.Admin] and
// [outbox.TxInserter] for *sql.Tx.
//
// A Store is safe for concurrent use. Any number of Stores, in one process or
// in several processes, may share one database file: SQLite lets one writer
// in at a time, and every claim is a single write transaction. Within a
// process, the writes of all Stores on one *sql.DB take turns in a FIFO queue
// that honours contexts, rather than in SQLite's sleeping busy handler, which
// can starve a waiter; between processes they meet at SQLite's lock under
// busy_timeout, and a write that still finds the database busy is tried up
// to three more times.
type Store struct {
	// Shared has the methods the Store shares with the other
	// database/sql store, as their interfaces document them: Reschedule
	// and Kill of [outbox.Store], ListDead, RetryDead and DiscardDead of
	// [outbox.Admin] (in statements of 1,000 rows), CountRows of
	// [outbox.RowCounter] and Ping of [outbox.Pinger].
	sqlcore.Shared

	db    *sql.DB
	table table
	gate  gate          // shared by every Store on db
	chunk int           // messages per statement
	core  *sqlcore.Core // what it does as mysqlstore does, in SQLite's dialect
	// columns maps the contract's columns to the table's (WithColumns); nil
	// when the table has the contract's names.
	mapping colmap.Map

	mu   sync.Mutex
	cols *columns // detected once; nil until then, reset by Migrate

	stmts prepared // statements prepared once (stmts.go)
}

// Option configures a [Store].
type Option func(*config)

type config struct {
	table     string
	chunkRows int        // messages per Ack, Reschedule, Kill or INSERT statement
	columns   colmap.Map // WithColumns; nil for the contract's names
}

func defaultConfig() config {
	return config{table: DefaultTable, chunkRows: chunkRows}
}

// withChunkRows sets how many messages one statement covers (tests use it to
// cross chunk boundaries with small batches).
func withChunkRows(n int) Option { return func(c *config) { c.chunkRows = n } }

// WithTable sets the outbox table: a plain name ("outbox_message") or a name
// qualified by the schema of an attached database ("aux.outbox_message").
// Each part must be a letter or underscore followed by up to 62 letters,
// digits or underscores, and must not start with "sqlite_"; anything else is
// rejected by [New], so no SQL can ride in on a table name. Default:
// DefaultTable ("outbox_message").
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// New returns a Store on db. It checks the options but does not touch the
// database: call [Store.Migrate] to create the table, or point the Store at
// an existing one. It returns an error naming every invalid option, and
// panics if db is nil, a programmer error.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	cfg := sqlcore.Options("sqlitestore", db, defaultConfig(), opts)
	t, err := parseTable(cfg.table)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: new store: WithTable: %w", err)
	}
	if cfg.chunkRows < 1 {
		return nil, fmt.Errorf("sqlitestore: new store: chunk of %d rows", cfg.chunkRows)
	}
	if err := errors.Join(sqlcore.CheckColumns(cfg.columns, "map the state columns too")...); err != nil {
		return nil, fmt.Errorf("sqlitestore: new store: %w", err)
	}
	s := &Store{db: db, table: t, gate: gateFor(db), chunk: cfg.chunkRows, mapping: cfg.columns}
	s.core = &sqlcore.Core{
		D: dialect, DB: db, Table: t.quoted(), Chunk: cfg.chunkRows,
		Columns: s.coreColumns, Write: s.write,
		RescheduleSQL: s.rescheduleSQL, KillSQL: s.killSQL,
		Map:     colmap.NewRewriter(cfg.columns, colmap.SQLite),
		Prepare: func(ctx context.Context, q string) *sql.Stmt { return s.stmts.stmt(ctx, db, q) },
	}
	s.Shared = s.core.Shared()
	return s, nil
}

// Table returns the name of the outbox table as given to [WithTable].
func (s *Store) Table() string { return s.table.raw }

// table is a validated table name, kept raw and split.
type table struct {
	raw    string
	schema string // "" when unqualified
	name   string
}

func parseTable(raw string) (table, error) {
	schema, name, err := dialect.ParseTable(raw)
	if err != nil {
		return table{}, err
	}
	if strings.HasPrefix(strings.ToLower(name), "sqlite_") {
		return table{}, fmt.Errorf("table name %q: names starting with sqlite_ are reserved by SQLite", raw)
	}
	return table{raw: raw, schema: schema, name: name}, nil
}

// quoteIdent quotes one identifier for SQLite.
func quoteIdent(s string) string { return dialect.Ident(s) }

// quoted is the table as it goes into SQL, schema-qualified when given.
func (t table) quoted() string { return dialect.Qualified(t.schema, t.name) }

// index names an index of the table: in the table's schema, prefixed with the
// table's name (SQLite index names are per schema, not per table).
func (t table) index(suffix string) string { return dialect.Qualified(t.schema, t.name+"_"+suffix) }

// catalogArgs are the arguments of the catalog queries on t: its name and schema.
func (t table) catalogArgs() []any {
	if t.schema == "" {
		return []any{t.name, "main"}
	}
	return []any{t.name, t.schema}
}

// columns records which optional columns the table has, and which of the
// claim path's indexes.
type columns struct {
	sqlcore.Columns
	pendingIndex bool // migration 0002's (claim.go)
	headIndex    bool // migration 0003's, for ordered claims (ordered.go)
}

// pendingIndex is the name of the claim path's index (migration 0002).
func (t table) pendingIndex() string { return t.name + "_pending" }

// queryer is what column detection needs: a *sql.DB, *sql.Conn or *sql.Tx.
type queryer = sqlcore.Queryer

// ErrNoTable is returned (wrapped) by the Store's methods when the outbox
// table does not exist: run [Store.Migrate] or create it by hand.
var ErrNoTable = errors.New("sqlitestore: outbox table not found")

// columns returns the table's optional columns, detecting them on first use
// through q (the caller's transaction when there is one, so that a pool of
// one connection cannot deadlock).
func (s *Store) columns(ctx context.Context, q queryer) (columns, error) {
	// The lock guards the cache only: the catalog query runs without it, so a
	// caller that holds the pool's only connection (a writer in InsertTx) and
	// one waiting for that connection (a claim) never wait on each other.
	s.mu.Lock()
	cached := s.cols
	s.mu.Unlock()
	if cached != nil {
		return *cached, nil
	}
	defs, err := declaredColumns(ctx, q, s.table)
	if err != nil {
		return columns{}, err
	}
	if defs, err = sqlcore.ContractDefs(s.mapping, s.table.raw, defs); err != nil {
		return columns{}, err
	}
	names := sqlcore.Names(defs)
	c := columns{}
	if c.Columns, err = sqlcore.ReadColumns(names, s.table.raw, ErrNoTable); err != nil {
		return columns{}, err
	}
	if c.pendingIndex, err = hasIndex(ctx, q, s.table, s.table.pendingIndex()); err != nil {
		return columns{}, err
	}
	if c.headIndex, err = hasIndex(ctx, q, s.table, s.table.headIndex()); err != nil {
		return columns{}, err
	}
	s.mu.Lock()
	s.cols = &c
	s.mu.Unlock()
	return c, nil
}

// coreColumns returns the table's optional columns (for sqlcore).
func (s *Store) coreColumns(ctx context.Context, q queryer) (sqlcore.Columns, error) {
	c, err := s.columns(ctx, q)
	return c.Columns, err
}

// declaredColumns lists t's columns with their declared types, in order; none when t does not exist.
func declaredColumns(ctx context.Context, q queryer, t table) ([]sqlcore.ColumnDef, error) {
	return sqlcore.ColumnDefs(ctx, q, t.raw, columnsSQL, t.catalogArgs()...)
}

// tableColumns returns the lower-cased column names of t; none when t does not exist.
func tableColumns(ctx context.Context, q queryer, t table) (map[string]bool, error) {
	defs, err := declaredColumns(ctx, q, t)
	return sqlcore.Names(defs), err
}

// hasIndex reports whether t has an index named name.
func hasIndex(ctx context.Context, q queryer, t table, name string) (bool, error) {
	names, err := sqlcore.Strings(ctx, q, "indexes of "+t.raw, indexesSQL, t.catalogArgs()...)
	return slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, name) }), err
}

// formatTime is how the Store writes timestamps (sqlcore.TimeLayout, UTC):
// SQLite's datetime() form with microseconds, which sorts in time order and
// which SQLite's date functions read.
func formatTime(t time.Time) string { return sqlcore.FormatTime(t) }

// julianToTime converts a Julian day number (SQLite's julianday()) to a time.
func julianToTime(jd float64) time.Time {
	const unixEpochJD = 2440587.5
	return time.UnixMicro(int64((jd - unixEpochJD) * 86400e6))
}
