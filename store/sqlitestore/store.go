package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
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
	db    *sql.DB
	table table
	gate  gate // shared by every Store on db
	chunk int  // messages per statement

	mu   sync.Mutex
	cols *columns // detected once; nil until then, reset by Migrate
}

// Option configures a [Store].
type Option func(*config)

type config struct {
	table     string
	chunkRows int // messages per Ack, Reschedule, Kill or INSERT statement
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
	if db == nil {
		panic("sqlitestore: New with a nil *sql.DB")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	t, err := parseTable(cfg.table)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: new store: WithTable: %w", err)
	}
	if cfg.chunkRows < 1 {
		return nil, fmt.Errorf("sqlitestore: new store: chunk of %d rows", cfg.chunkRows)
	}
	return &Store{db: db, table: t, gate: gateFor(db), chunk: cfg.chunkRows}, nil
}

// Table returns the name of the outbox table as given to [WithTable].
func (s *Store) Table() string { return s.table.raw }

// Ping checks that the database can be reached.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlitestore: ping: %w", err)
	}
	return nil
}

// table is a validated table name, kept raw and quoted.
type table struct {
	raw    string
	schema string // "" when unqualified
	name   string
}

// identPattern is the strict shape of each part of a table name.
var identPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func parseTable(raw string) (table, error) {
	parts := strings.Split(raw, ".")
	if len(parts) > 2 {
		return table{}, fmt.Errorf("table name %q has more than one dot", raw)
	}
	for _, p := range parts {
		if !identPattern.MatchString(p) {
			return table{}, fmt.Errorf("table name %q: %q is not a letter or underscore followed by up to 62 letters, digits or underscores", raw, p)
		}
	}
	t := table{raw: raw, name: parts[len(parts)-1]}
	if len(parts) == 2 {
		t.schema = parts[0]
	}
	if strings.HasPrefix(strings.ToLower(t.name), "sqlite_") {
		return table{}, fmt.Errorf("table name %q: names starting with sqlite_ are reserved by SQLite", raw)
	}
	return t, nil
}

// quoteIdent quotes one identifier for SQLite.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoted is the table as it goes into SQL, schema-qualified when given.
func (t table) quoted() string {
	if t.schema == "" {
		return quoteIdent(t.name)
	}
	return quoteIdent(t.schema) + "." + quoteIdent(t.name)
}

// index names an index of the table: in the table's schema, prefixed with the
// table's name (SQLite index names are per schema, not per table).
func (t table) index(suffix string) string {
	name := quoteIdent(t.name + "_" + suffix)
	if t.schema == "" {
		return name
	}
	return quoteIdent(t.schema) + "." + name
}

// contractColumns are the columns every outbox table has (shared/DESIGN.md).
var contractColumns = []string{
	"id", "message_id", "aggregate_type", "aggregate_id", "event_type", "payload",
	"status", "retry_count", "next_retry_at", "created_at", "updated_at",
}

// columns records which optional columns the table has, and whether it has
// the pending-rows index of migration 0002.
type columns struct {
	headers, topic, partitionKey, lastError bool
	pendingIndex                            bool
	headIndex                               bool // migration 0003's, for ordered claims (ordered.go)
}

// pendingIndex is the name of the claim path's index (migration 0002).
func (t table) pendingIndex() string { return t.name + "_pending" }

// queryer is what column detection needs: a *sql.DB, *sql.Conn or *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

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
	names, err := tableColumns(ctx, q, s.table)
	if err != nil {
		return columns{}, err
	}
	if len(names) == 0 {
		return columns{}, fmt.Errorf("%w: %s", ErrNoTable, s.table.raw)
	}
	var missing []string
	for _, c := range contractColumns {
		if !names[c] {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return columns{}, fmt.Errorf("table %s lacks contract columns: %s", s.table.raw, strings.Join(missing, ", "))
	}
	c := columns{
		headers:      names["headers"],
		topic:        names["topic"],
		partitionKey: names["partition_key"],
		lastError:    names["last_error"],
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

// tableColumns returns the lower-cased column names of t; none when t does not exist.
func tableColumns(ctx context.Context, q queryer, t table) (map[string]bool, error) {
	schema := t.schema
	if schema == "" {
		schema = "main"
	}
	rows, err := q.QueryContext(ctx, "SELECT name FROM pragma_table_info(?, ?)", t.name, schema)
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", t.raw, err)
	}
	defer rows.Close()
	names := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("read columns of %s: %w", t.raw, err)
		}
		names[strings.ToLower(n)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", t.raw, err)
	}
	return names, nil
}

// hasIndex reports whether t has an index named name.
func hasIndex(ctx context.Context, q queryer, t table, name string) (bool, error) {
	schema := t.schema
	if schema == "" {
		schema = "main"
	}
	rows, err := q.QueryContext(ctx, "SELECT name FROM pragma_index_list(?, ?)", t.name, schema)
	if err != nil {
		return false, fmt.Errorf("read indexes of %s: %w", t.raw, err)
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return false, fmt.Errorf("read indexes of %s: %w", t.raw, err)
		}
		found = found || strings.EqualFold(n, name)
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("read indexes of %s: %w", t.raw, err)
	}
	return found, nil
}

// timeLayout is how the Store writes timestamps: UTC, SQLite's datetime()
// form with microseconds. Strings in this form sort in time order, and
// SQLite's date functions read them.
const timeLayout = "2006-01-02 15:04:05.000000"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// parseTime reads a timestamp column scanned into an any: a time.Time (the
// driver parses DATETIME and TIMESTAMP columns), text in one of SQLite's time
// formats (UTC unless it carries a zone), or unix seconds. ok is false for
// NULL and for anything it cannot read.
func parseTime(v any) (time.Time, bool) {
	switch v := v.(type) {
	case time.Time:
		return v, true
	case int64:
		return time.Unix(v, 0), true
	case []byte:
		return parseTimeText(string(v))
	case string:
		return parseTimeText(v)
	}
	return time.Time{}, false
}

var textTimeLayouts = []string{
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04Z07:00",
	"2006-01-02T15:04Z07:00",
	"2006-01-02 15:04",
	"2006-01-02T15:04",
	"2006-01-02",
}

func parseTimeText(s string) (time.Time, bool) {
	for _, l := range textTimeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// julianToTime converts a Julian day number (SQLite's julianday()) to a time.
func julianToTime(jd float64) time.Time {
	const unixEpochJD = 2440587.5
	return time.UnixMicro(int64((jd - unixEpochJD) * 86400e6))
}
