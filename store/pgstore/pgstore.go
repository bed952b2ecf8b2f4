package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// DefaultTable is the table a Store uses unless [WithTable] says otherwise.
const DefaultTable = "outbox_message"

// ErrDuplicate is matched (errors.Is) by the error InsertTx returns when a
// message's MessageID is already in the table.
var ErrDuplicate = outbox.ErrDuplicate

// Compile-time checks of what a Store implements.
var (
	_ outbox.Store              = (*Store)(nil)
	_ outbox.Migrator           = (*Store)(nil)
	_ outbox.Pinger             = (*Store)(nil)
	_ outbox.Notifier           = (*Store)(nil)
	_ outbox.RowCounter         = (*Store)(nil)
	_ outbox.TxInserter[pgx.Tx] = (*Store)(nil)
	_ outbox.TxDeleter[pgx.Tx]  = (*Store)(nil)
)

// Store is an [outbox.Store] on a PostgreSQL table, through a pgx v5 pool.
//
// It claims with one statement (SELECT ... FOR UPDATE SKIP LOCKED feeding an
// UPDATE that counts the attempt and sets the lease) and acknowledges,
// reschedules and kills a whole batch with one statement each, fenced by the
// attempt. It works on a table created by [Store.Migrate] and on a table that
// has only the contract columns (see the package documentation); it finds out
// which columns the table has on first use and remembers it.
//
// A Store is safe for concurrent use. It never closes the pool.
type Store struct {
	// Admin has the methods the Store shares with the other stores, as
	// their interfaces document them: ListDead, RetryDead and DiscardDead
	// of [outbox.Admin] (in statements of 1,000 rows), CountRows of
	// [outbox.RowCounter] and Ping of [outbox.Pinger].
	sqlcore.Admin

	pool    *pgxpool.Pool
	core    *sqlcore.Core // the statements it runs as the other stores do, in PostgreSQL's dialect
	cfg     config
	ident   string // the table, quoted for SQL
	channel string // NOTIFY channel, "" when notifications are off
	// nextNotify is when (Unix ns) the next write may notify, with WithNotifyInterval.
	nextNotify atomic.Int64
	// claimer is the way the Store claims, chosen by New (claim_*.go).
	claimer claimer
	// claimCursor is where the next unordered claim starts (store.go).
	claimCursor claimCursor
	// slotCursors are the claim cursors of ordered claims with a slot
	// preference, by (slot, slots) (cursorFor). Guarded by mu.
	slotCursors map[[2]int]*claimCursor

	mu      sync.Mutex
	q       *queries      // built from the table's columns on first use
	archive *archiveInfo  // set once Archive has made sure of its table
	ordered *orderedState // ordered claims: found out on first use (ordered.go)
	indexes *tableIndexes // the claim indexes the table has: found out on first use (indexes.go)
	cursor  orderedCursor // where the ordered skip scan stopped

	// m rewrites statements for a table mapped by WithColumns; nil without
	// a mapping (columns.go).
	m *colmap.Rewriter
}

type config struct {
	table         string // as given, validated
	notify        bool
	notifyTrigger bool          // Migrate installs a NOTIFY trigger; Listen listens (notifytrigger.go)
	notifyEvery   time.Duration // at most one notifying write per this long; 0: every write
	asyncCommit   bool          // the relay's statements commit with synchronous_commit = off
	batchLease    bool          // claims lease a batch with one row of a side table (claim_batchlease.go)
	heldClaims    bool          // claims hold their rows in a transaction until settled (claim_held.go)
	rescanEvery   time.Duration // claimCursor's; 0: rescanEvery (tests set it)
	listenCheck   time.Duration // Listen checks its connection after this long without a notification
	headsOnly     bool          // ordered claims take heads only, not runs (tests of the heads claim set it)
	columns       colmap.Map    // WithColumns; nil: the contract's names (columns.go)
}

// Option configures a [Store].
type Option func(*config)

// WithTable sets the table: a name, or schema.name. Each part must be a
// lower-case SQL identifier (letters a-z, digits and underscores, not starting
// with a digit, at most 63 bytes); anything else is refused by [New], so no
// SQL can be smuggled in through the name. An unqualified name is looked up
// through the connection's search_path, as PostgreSQL does. The schema must
// exist. Default: DefaultTable ("outbox_message").
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithNotify turns on LISTEN/NOTIFY: every write also sends a NOTIFY (delivered
// when the transaction commits) on a channel named after the table, and
// [Store.Listen] wakes the relay when one arrives, so messages go out within
// milliseconds instead of at the next poll. Writers and relays must both turn
// it on. NOTIFY serializes the commits of the transactions that send it
// (PostgreSQL takes a global lock at commit), which limits write throughput
// under heavy concurrency; measure before enabling it on a hot table.
// Default: off.
func WithNotify(on bool) Option { return func(c *config) { c.notify = on } }

// WithNotifyInterval coalesces the notifications of [WithNotify] on the write
// side: of the transactions this Store writes in, at most one per d sends a
// NOTIFY; the others count on it, or on the relay's adaptive polling, which
// looks again within its minimum poll interval while it finds rows. This
// matters for write throughput: PostgreSQL commits notifying transactions
// one at a time (docs/tuning.md has a measurement), and with d of a few
// milliseconds a busy service sends a few hundred
// notifications a second instead of one per transaction. What it costs: a
// message written in the interval after a notifying transaction that then
// rolled back waits for the next notification or poll. It is safe for
// concurrent use across the Store's callers. Default: 0 (every transaction
// that writes notifies).
func WithNotifyInterval(d time.Duration) Option { return func(c *config) { c.notifyEvery = d } }

// WithListenCheck sets how long [Store.Listen] waits for a notification
// before it checks, within [ListenTimeout], that its connection still
// answers; when it does not (the database or the network between stopped
// answering), Listen returns an error and the relay polls while it starts
// the listener again. It must be positive. Default: DefaultListenCheck (15 s).
func WithListenCheck(d time.Duration) Option { return func(c *config) { c.listenCheck = d } }

// WithNotifyTrigger makes [Store.Migrate] install a statement-level AFTER
// INSERT trigger on the table that sends the same NOTIFY as [WithNotify], so
// that rows written by any program (a service in another language, a
// hand-written INSERT) wake the relays at once. The trigger fires once per
// INSERT statement, and PostgreSQL folds the identical notifications of one
// transaction into one, so a transaction that writes a thousand rows sends one
// notification. [Store.Listen] listens as with WithNotify; the Store's own
// writes leave the NOTIFY to the trigger. The same commit-serializing cost as
// WithNotify applies, to every writer of the table. Migrate never removes the
// trigger; drop it by hand (DROP TRIGGER outbox_notify ON the table) to stop.
// Default: off.
func WithNotifyTrigger(on bool) Option { return func(c *config) { c.notifyTrigger = on } }

// WithBatchLease makes a claim lease its batch with one row in a side table
// (the table's name with a _lease suffix, created by [Store.Migrate]) instead
// of writing every claimed row, which roughly halves what a relay costs
// PostgreSQL when sent rows are kept and divides it by about three when they
// are deleted. Claims of the table take turns, a few milliseconds each.
//
// The guarantees stay; what changes is when the attempt reaches the table.
// A claim only reads the rows: Attempt is retry_count + 1 as always, but
// retry_count and next_retry_at are left as they were, and the batch's
// attempt is written when it is settled (Ack, Reschedule, Kill set
// retry_count to the attempt). If the relay dies or stalls, its lease runs
// out and the next claim counts the attempt of every row still in it before
// the rows can be claimed again, so a message that crashes the relay still
// reaches max attempts, and a relay that comes back late is fenced out as
// with row leases. Ordered claims with batch leases use the plain walk of
// the backlog for aggregate heads. Every relay on a table must use the same
// setting: a relay without it does not see batch leases and could publish a
// leased row a second time. Default: off (row leases: claimed rows hold the
// lease in next_retry_at and the attempt in retry_count, as the table
// contract describes).
func WithBatchLease(on bool) Option { return func(c *config) { c.batchLease = on } }

// WithHeldClaims makes each unordered claim lock its rows (SELECT ... FOR
// UPDATE SKIP LOCKED) in a transaction that stays open while the relay
// publishes the batch, and settle them in that same transaction: the sent
// rows deleted or marked sent, the failed ones rescheduled or marked dead,
// then one commit. Each row is written once, instead of a lease and then an
// acknowledgement (each a new version of the row and its index entries), and
// a batch costs one commit instead of two. It is the fastest way to drain a
// backlog, and several relays share a table without waiting for each other:
// other claims skip the locked rows, and no relay can take them over while
// the transaction is open.
//
// If the relay, its connection or the database dies before the commit, the
// rows are pending again as they were, and the next claim publishes them
// again. What it costs:
//   - A relay holds one connection and an open transaction per batch in
//     flight, for as long as the publish takes (bounded by the relay's
//     publish timeout); size the pool for the relay's max in flight. Each
//     claim sets idle_in_transaction_session_timeout to its lease for its
//     own transaction, so the server ends the transaction of a relay that
//     stopped settling (paused, cut off) once the lease is over.
//   - An attempt that never finished is not counted (there is no lease to run
//     out): a message that makes the relay process crash every time it is
//     published is never marked dead.
//
// Ordered claims are not held: with ordering (the relay's default) the
// store leases rows as without this option, so held claims need
// outbox.WithOrdering(false, …) on the relay. Relays with held claims and relays with row leases (the
// default) may share a table; [WithBatchLease] excludes both. Default: off.
func WithHeldClaims(on bool) Option { return func(c *config) { c.heldClaims = on } }

// WithAsyncCommit makes the relay's own statements (Claim, Ack, Reschedule
// and Kill) commit with synchronous_commit = off, set for their transaction
// only: PostgreSQL then confirms them without waiting for the WAL to reach
// disk, which saves a disk flush per statement and makes small batches several
// times faster. Writes by the service (InsertTx) are not affected.
//
// What it costs: if the PostgreSQL server crashes (not the relay: the
// server), it may lose the relay's statements of the last moments before the
// crash (at most about three times wal_writer_delay, 600 ms by default). A
// lost claim gives the rows back with their attempt uncounted; a lost ack
// makes the rows pending again, so they are published a second time. Nothing
// is ever lost, because the rows themselves were written by the service's
// transactions, which still commit synchronously; but the duplicates after a
// database crash are not limited to the batch in flight. Consumers that
// deduplicate by message id do not notice. Default: off.
func WithAsyncCommit(on bool) Option { return func(c *config) { c.asyncCommit = on } }

// identPart is one part of a table name.
var identPart = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// New returns a Store on pool. It checks the options but does not touch the
// database: call [Store.Migrate] to create the table. It panics if pool is
// nil, a programmer error.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		panic("pgstore: New with a nil pool")
	}
	cfg := config{table: DefaultTable, listenCheck: DefaultListenCheck}
	for _, o := range opts {
		o(&cfg)
	}
	parts, err := splitTable(cfg.table)
	if err != nil {
		return nil, fmt.Errorf("pgstore: new store: %w", err)
	}
	if cfg.listenCheck <= 0 {
		return nil, fmt.Errorf("pgstore: new store: WithListenCheck: %v is not positive", cfg.listenCheck)
	}
	if cfg.heldClaims && cfg.batchLease {
		return nil, errors.New("pgstore: new store: WithHeldClaims and WithBatchLease are two ways of claiming; choose one")
	}
	if err := errors.Join(cfg.checkColumns()...); err != nil {
		return nil, fmt.Errorf("pgstore: new store: %w", err)
	}
	s := &Store{pool: pool, cfg: cfg, ident: pgx.Identifier(parts).Sanitize(), m: colmap.NewRewriter(cfg.columns, colmap.PostgreSQL)}
	s.claimCursor.every = cmp.Or(cfg.rescanEvery, rescanEvery)
	rows := &rowLeaseClaimer{s: s, ordered: s.claimRuns}
	if cfg.headsOnly {
		rows.ordered = s.claimHeads
	}
	switch {
	case cfg.batchLease:
		s.claimer = batchLeaseClaimer{s}
	case cfg.heldClaims:
		s.claimer = &heldClaimer{rowLeaseClaimer: rows}
	default:
		s.claimer = rows
	}
	if cfg.notify || cfg.notifyTrigger {
		s.channel = channelName(cfg.table)
	}
	// Chunk: ids per CountRows statement, as the other stores count them.
	s.core = &sqlcore.Core{D: dialect, Run: poolRunner{pool}, Table: s.ident, Chunk: 1000, Map: s.m,
		Write: func(_ context.Context, f func() error) error { return f() },
		Columns: func(ctx context.Context, _ sqlcore.Queryer) (sqlcore.Columns, error) {
			q, err := s.queriesFor(ctx, s.poolRow)
			if err != nil {
				return sqlcore.Columns{}, err
			}
			return q.Columns, nil
		}}
	s.Admin = s.core.Admin()
	return s, nil
}

// splitTable validates a table name and returns its parts.
func splitTable(name string) ([]string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("WithTable: %q has more than two parts (use table or schema.table)", name)
	}
	for _, p := range parts {
		if !identPart.MatchString(p) {
			return nil, fmt.Errorf("WithTable: %q is not a valid name: each part must match %s", name, identPart)
		}
	}
	return parts, nil
}

// channelName is the NOTIFY channel of a table: its name, shortened with a
// hash when it is too long for a channel.
func channelName(table string) string {
	return sqlcore.SideName(table, "", 63)
}

// Table returns the table's name as configured (table or schema.table).
func (s *Store) Table() string { return s.cfg.table }

// queriesFor returns the statements for the table, finding out its columns
// with run on first use.
func (s *Store) queriesFor(ctx context.Context, run rowQuerier) (*queries, error) {
	s.mu.Lock()
	q := s.q
	s.mu.Unlock()
	if q != nil {
		return q, nil
	}
	cols, err := s.columns(ctx, run)
	if err != nil {
		return nil, err
	}
	var encoding string
	if err := run(ctx, "SELECT current_setting('server_encoding')").Scan(&encoding); err != nil {
		return nil, fmt.Errorf("pgstore: read server_encoding: %w", err)
	}
	q, err = buildQueries(s.ident, cols, buildOptions{
		asyncCommit: s.cfg.asyncCommit, leaseTable: s.leaseTable(), heldClaims: s.cfg.heldClaims,
		utf8: encoding == "UTF8"})
	if err != nil {
		return nil, fmt.Errorf("pgstore: table %s: %w", s.cfg.table, err)
	}
	if h := q.held; h != nil && s.m != nil { // run where they are, not through one place as the others
		d := &h.deferred
		for _, p := range []*string{&h.due, &h.claim, &h.claimStatus, &h.ack, &h.del, &d.ack, &d.del, &d.reschedule, &d.kill} {
			*p = s.m.SQL(*p)
		}
	}
	s.mu.Lock()
	s.q = q
	s.mu.Unlock()
	return q, nil
}

// forget drops what the Store knows of the table's columns (after a migration).
func (s *Store) forget() {
	s.mu.Lock()
	s.q, s.archive, s.ordered, s.indexes = nil, nil, nil, nil
	s.mu.Unlock()
}

// rowQuerier runs a query that returns one row: a pool, a pgx.Tx or a *sql.Tx.
type rowQuerier func(ctx context.Context, sql string, args ...any) scanner

type scanner interface{ Scan(dest ...any) error }

func (s *Store) poolRow(ctx context.Context, sql string, args ...any) scanner {
	return s.pool.QueryRow(ctx, sql, args...)
}

// columnsSQL lists a table's columns as "name type" lines, in one value so
// that it can be read the same way through pgx and database/sql.
const columnsSQL = `SELECT COALESCE(string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), chr(10)), '')
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`

// errNoTable is wrapped by the error of a Store's methods when the table does not exist.
var errNoTable = errors.New("does not exist")

// columns returns the table's column types by name, the contract's names
// with WithColumns. A missing table is an error.
func (s *Store) columns(ctx context.Context, run rowQuerier) (map[string]string, error) {
	cols, err := s.tableColumns(ctx, run)
	if err != nil {
		return nil, err
	}
	return s.contractColumns(cols)
}

// tableColumns returns the table's column types by the table's own names.
func (s *Store) tableColumns(ctx context.Context, run rowQuerier) (map[string]string, error) {
	var list string
	if err := run(ctx, columnsSQL, s.ident).Scan(&list); err != nil {
		return nil, fmt.Errorf("pgstore: read columns of %s: %w", s.cfg.table, err)
	}
	if list == "" {
		return nil, fmt.Errorf("pgstore: table %s %w (run Migrate, or check the search_path)", s.cfg.table, errNoTable)
	}
	cols := map[string]string{}
	for _, line := range strings.Split(list, "\n") {
		if name, typ, ok := strings.Cut(line, " "); ok {
			cols[name] = typ
		}
	}
	return cols, nil
}
