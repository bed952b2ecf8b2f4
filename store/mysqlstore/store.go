package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// DefaultTable is the table a Store uses unless [WithTable] says otherwise.
const DefaultTable = "outbox_message"

// Compile-time checks that Store implements the interfaces the relay, the
// Writer and the CLI look for.
var (
	_ outbox.Store               = (*Store)(nil)
	_ outbox.Migrator            = (*Store)(nil)
	_ outbox.Pinger              = (*Store)(nil)
	_ outbox.Admin               = (*Store)(nil)
	_ outbox.RowCounter          = (*Store)(nil)
	_ outbox.RelayLister         = (*Store)(nil)
	_ outbox.TxInserter[*sql.Tx] = (*Store)(nil)
)

// ErrDuplicate is matched (errors.Is) by the error InsertTx returns when a
// message's MessageID is already in the table.
var ErrDuplicate = outbox.ErrDuplicate

// ErrNoTable is matched (errors.Is) by the error the Store's methods return
// when the outbox table does not exist: run [Store.Migrate] or create it.
var ErrNoTable = errors.New("mysqlstore: outbox table not found")

// Store is an [outbox.Store] on a MySQL 8 or MariaDB 10.6+ table (InnoDB)
// through database/sql and github.com/go-sql-driver/mysql. It wraps a
// *sql.DB the caller opened (preferably with [Open] or [DSN]) and never
// closes it.
//
// It claims in a short READ COMMITTED transaction (SELECT ... FOR UPDATE SKIP
// LOCKED, then one UPDATE that counts the attempt and sets the lease), and
// acknowledges, reschedules and kills a batch with one statement per 1,000
// messages, fenced by the attempt (times are stored in UTC; on a DATETIME
// column without fractional seconds a retry time keeps its seconds). It
// works on a table created by [Store.Migrate] and on one with only the
// contract columns; it finds out which columns and indexes the table has on
// first use and remembers it.
//
// A Store is safe for concurrent use, and any number of Stores, in one
// process or many, may share a table.
type Store struct {
	// Shared has the methods the Store shares with the other
	// database/sql store, as their interfaces document them: Reschedule
	// and Kill of [outbox.Store], ListDead, RetryDead and DiscardDead of
	// [outbox.Admin] (in statements of 1,000 rows), CountRows of
	// [outbox.RowCounter] and Ping of [outbox.Pinger].
	sqlcore.Shared

	db    *sql.DB
	table table
	chunk int           // messages per statement
	core  *sqlcore.Core // what it does as sqlitestore does, in MySQL's dialect
	// mapping maps the contract's columns to the table's (WithColumns); nil
	// when the table has the contract's names.
	mapping colmap.Map
	// afterLock, set only by tests, runs between an ordered claim's locking
	// reads and its fresh read of their runs (runs.go).
	afterLock func()
	// frontPaused is how many more ordered claims read their runs per
	// aggregate before they try the front scan again (front.go).
	frontPaused sqlcore.Pause
	// front, set only by tests, makes every ordered claim try the front
	// scan (never paused) or none.
	front frontPolicy
	// headsPaused is how many more heads steps read only the first page of
	// the backlog (pickHeads): [0] of any aggregate, [1] of a slot's.
	headsPaused [2]sqlcore.Pause

	mu          sync.Mutex
	info        *tableInfo // detected once; nil until then, reset by Migrate
	archiveCols string     // columns Archive moves, once it made sure of its table
	aggregates  [2]int64   // ordered claims, by BlockOnDead: aggregates the last loose scan counted (ordered.go)
}

// Option configures a [Store].
type Option func(*config)

type config struct {
	table     string
	chunkRows int
	columns   colmap.Map // WithColumns; nil for the contract's names
}

// chunkRows is how many messages one INSERT, claim UPDATE, Ack, Reschedule
// or Kill statement covers; a larger batch runs as several statements. A
// statement may carry at most 65,535 placeholders.
const chunkRows = 1000

func defaultConfig() config { return config{table: DefaultTable, chunkRows: chunkRows} }

// WithTable sets the outbox table: a name ("outbox_message") or one
// qualified by its database ("shop.outbox_message"). Each part must be a
// letter or underscore followed by up to 63 letters, digits or underscores;
// anything else is rejected by [New], so no SQL can ride in on a table name.
// An unqualified name is in the connection's current database. Default:
// DefaultTable ("outbox_message").
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// withChunkRows sets how many messages one statement covers (tests use it to
// cross statement boundaries with small batches).
func withChunkRows(n int) Option { return func(c *config) { c.chunkRows = n } }

// New returns a Store on db. It checks the options but does not touch the
// database: call [Store.Migrate] to create the table, or point the Store at
// an existing one. It returns an error naming every invalid option, and
// panics if db is nil, a programmer error.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	cfg := sqlcore.Options("mysqlstore", db, defaultConfig(), opts)
	var errs []error
	t, err := parseTable(cfg.table)
	if err != nil {
		errs = append(errs, fmt.Errorf("WithTable: %w", err))
	}
	if cfg.chunkRows < 1 || cfg.chunkRows > 5000 {
		errs = append(errs, fmt.Errorf("chunk of %d rows is not between 1 and 5000", cfg.chunkRows))
	}
	errs = append(errs, sqlcore.CheckColumns(cfg.columns, "map the state columns too")...)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("mysqlstore: new store: %w", err)
	}
	s := &Store{db: db, table: t, chunk: cfg.chunkRows, mapping: cfg.columns}
	s.core = &sqlcore.Core{
		D: dialect, DB: db, Table: t.quoted(), Chunk: cfg.chunkRows,
		Columns: s.coreColumns, Write: retryDeadlock,
		TxOptions:     &sql.TxOptions{Isolation: sql.LevelReadCommitted}, // not READ UNCOMMITTED: runs.go
		RescheduleSQL: s.rescheduleSQL, KillSQL: s.killSQL,
		Map: colmap.NewRewriter(cfg.columns, colmap.MySQL),
	}
	s.Shared = s.core.Shared()
	return s, nil
}

// Table returns the name of the outbox table as given to [WithTable].
func (s *Store) Table() string { return s.table.raw }

// table is a validated table name, kept raw and split.
type table struct {
	raw    string
	schema string // the database; "" for the connection's current one
	name   string
}

func parseTable(raw string) (table, error) {
	schema, name, err := dialect.ParseTable(raw)
	return table{raw: raw, schema: schema, name: name}, err
}

// quoteIdent quotes one identifier with backticks.
func quoteIdent(s string) string { return dialect.Ident(s) }

// quoted is the table as it goes into SQL.
func (t table) quoted() string { return dialect.Qualified(t.schema, t.name) }

// schemaArg is the table's database as a query argument: NULL for the
// current one (the queries read it as COALESCE(?, DATABASE())).
func (t table) schemaArg() any {
	if t.schema == "" {
		return nil
	}
	return t.schema
}

// tableInfo is what the Store knows of its table.
type tableInfo struct {
	sqlcore.Columns
	// claimIndex is an index whose leading columns are (status, id), which
	// the claim forces so that it walks pending rows in id order and locks
	// only what it takes; "" when the table has none.
	claimIndex string
	// pkID is whether the primary key is (or starts with) id, as the
	// contract has it; Ack then names it so that it reads only its rows.
	pkID bool
	// statusIndex is an index whose leading columns are (status,
	// next_retry_at), the contract's, which claims read when the table has
	// no claimIndex (claimSQLs); "" when the table has none.
	statusIndex string
	// headIndex is an index whose leading columns are (status,
	// aggregate_type, aggregate_id), which ordered claims read (ordered.go);
	// "" when the table has none.
	headIndex string
}

// byStatusIndex reports whether claims walk the contract's (status,
// next_retry_at) index: the table has no claimIndex, and InnoDB ends that
// index with an id primary key, so its rows never claimed come in id order.
func (i tableInfo) byStatusIndex() bool { return i.claimIndex == "" && i.statusIndex != "" && i.pkID }

// queryer is a *sql.DB, *sql.Conn or *sql.Tx.
type queryer = sqlcore.Queryer

// tableInfo returns what the table has, detecting it on first use through q
// (the caller's transaction when there is one, so that a pool of one
// connection cannot deadlock).
func (s *Store) tableInfo(ctx context.Context, q queryer) (tableInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info != nil {
		return *s.info, nil
	}
	defs, err := columnDefs(ctx, q, s.table)
	if err != nil {
		return tableInfo{}, err
	}
	if defs, err = sqlcore.ContractDefs(s.mapping, s.table.raw, defs); err != nil {
		return tableInfo{}, err
	}
	names := sqlcore.Names(defs)
	cols, err := sqlcore.ReadColumns(names, s.table.raw, ErrNoTable)
	if err != nil {
		return tableInfo{}, err
	}
	info := tableInfo{Columns: cols}
	lead, err := s.leadingColumns(ctx, q)
	if err != nil {
		return tableInfo{}, err
	}
	info.claimIndex, info.headIndex = claimIndex(lead), headIndex(lead)
	info.statusIndex = indexLeadingWith(lead, "status", "next_retry_at")
	if info.pkID, err = s.primaryOnID(ctx, q); err != nil {
		return tableInfo{}, err
	}
	s.info = &info
	return info, nil
}

// coreColumns returns the table's optional columns (for sqlcore).
func (s *Store) coreColumns(ctx context.Context, q queryer) (sqlcore.Columns, error) {
	info, err := s.tableInfo(ctx, q)
	return info.Columns, err
}

// forget drops what the Store knows of the table (after a migration).
func (s *Store) forget() {
	s.mu.Lock()
	s.info, s.archiveCols = nil, ""
	s.mu.Unlock()
}

// columnDefs lists t's columns with their full types, in order; none when t does not exist.
func columnDefs(ctx context.Context, q queryer, t table) ([]sqlcore.ColumnDef, error) {
	return sqlcore.ColumnDefs(ctx, q, t.raw, columnsSQL, t.schemaArg(), t.name)
}

// tableColumns returns the lower-cased column names of t; none when t does not exist.
func tableColumns(ctx context.Context, q queryer, t table) (map[string]bool, error) {
	defs, err := columnDefs(ctx, q, t)
	return sqlcore.Names(defs), err
}

// leadingColumns reads the first three columns of every index of t, by
// index name, in lower case ("" where an index has fewer).
func leadingColumns(ctx context.Context, q queryer, t table) (map[string][3]string, error) {
	rows, err := q.QueryContext(ctx, indexesSQL, t.schemaArg(), t.name)
	if err != nil {
		return nil, fmt.Errorf("read indexes of %s: %w", t.raw, err)
	}
	defer rows.Close()
	lead := map[string][3]string{}
	for rows.Next() {
		var name, col string
		var seq int
		if err := rows.Scan(&name, &seq, &col); err != nil {
			return nil, fmt.Errorf("read indexes of %s: %w", t.raw, err)
		}
		l := lead[name]
		l[seq-1] = strings.ToLower(col)
		lead[name] = l
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read indexes of %s: %w", t.raw, err)
	}
	return lead, nil
}

// leadingColumns is leadingColumns of the table, under the contract's names
// (WithColumns; "" for a column no contract column maps to).
func (s *Store) leadingColumns(ctx context.Context, q queryer) (map[string][3]string, error) {
	lead, err := leadingColumns(ctx, q, s.table)
	for name, l := range lead {
		for i, c := range l {
			l[i] = sqlcore.ContractName(s.mapping, c)
		}
		lead[name] = l
	}
	return lead, err
}

// indexLeadingWith returns the name of an index in lead whose leading
// columns are cols (the first, by name, when several are), or "".
func indexLeadingWith(lead map[string][3]string, cols ...string) string {
	var found []string
	for name, l := range lead {
		if slices.Equal(l[:len(cols)], cols) {
			found = append(found, name)
		}
	}
	if len(found) == 0 {
		return ""
	}
	sort.Strings(found)
	return found[0]
}

// claimIndex is the index a claim walks pending rows in id order on:
// leading columns (status, id).
func claimIndex(lead map[string][3]string) string { return indexLeadingWith(lead, "status", "id") }

// headIndex is the index ordered claims find an aggregate's earlier rows
// with: leading columns (status, aggregate_type, aggregate_id).
func headIndex(lead map[string][3]string) string {
	return indexLeadingWith(lead, "status", "aggregate_type", "aggregate_id")
}

// primaryOnID reports whether the primary key of the table starts with id.
func (s *Store) primaryOnID(ctx context.Context, q queryer) (bool, error) {
	t := s.table
	cols, err := sqlcore.Strings(ctx, q, "primary key of "+t.raw, primaryKeySQL, t.schemaArg(), t.name)
	return len(cols) > 0 && sqlcore.ContractName(s.mapping, strings.ToLower(cols[len(cols)-1])) == "id", err
}

// MySQL error numbers the Store translates or retries.
const (
	errDupEntry = 1062 // ER_DUP_ENTRY
	errDeadlock = 1213 // ER_LOCK_DEADLOCK
)

func isMySQLError(err error, number uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}

// deadlockRetries is how many times a statement InnoDB rolled back to break
// a deadlock is tried again.
const deadlockRetries = 3

// retryDeadlock runs f again when InnoDB chose it as a deadlock victim (its
// work was rolled back, so running it again is safe).
func retryDeadlock(ctx context.Context, f func() error) error {
	var err error
	for range deadlockRetries + 1 {
		if err = f(); err == nil || !isMySQLError(err, errDeadlock) || ctx.Err() != nil {
			return err
		}
	}
	return err
}
