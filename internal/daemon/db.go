package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// Store is what the daemon and the CLI need from a store: the relay's view,
// migrations, a health check and the check of the table. Every store
// package implements it.
type Store interface {
	outbox.Store
	outbox.Migrator
	outbox.Pinger
	outbox.TableChecker
}

// DBParams are the inputs of [OpenDB] besides the URL.
type DBParams struct {
	// Table is the outbox table. Default: config.DefaultTable.
	Table string
	// MaxConns bounds the pool the daemon opens. Default: 1 + config.SpareConns.
	MaxConns int
	// Notify turns on PostgreSQL LISTEN/NOTIFY (pgstore.WithNotify).
	Notify bool
	// NotifyTrigger makes Migrate install the NOTIFY trigger, and the
	// store listen as with Notify (pgstore.WithNotifyTrigger). PostgreSQL only.
	NotifyTrigger bool
	// BatchLease leases each claimed batch with one row of the table's
	// _lease side table, which Migrate creates (pgstore.WithBatchLease).
	// PostgreSQL only.
	BatchLease bool
	// AsyncCommit commits the relay's statements with synchronous_commit =
	// off (pgstore.WithAsyncCommit). PostgreSQL only.
	AsyncCommit bool
	// HeldClaims makes each unordered claim hold its rows in a transaction
	// that stays open until the batch is settled (pgstore.WithHeldClaims): a
	// relay then holds a connection per batch in flight, which MaxConns must
	// allow for (config.Config.PoolSize does). Exclusive with BatchLease.
	// PostgreSQL only.
	HeldClaims bool
	// Columns maps the table's columns (config.Config.Columns). A mapping
	// that keeps the state columns reaches the store (pgstore.WithColumns);
	// a log-only one does not: such a table is never polled, and the store
	// is then only the contract's view of the dead table's database.
	// PostgreSQL only.
	Columns map[string]string
}

// DB is an open database and the store on its outbox table.
type DB struct {
	// Store is the store on the table.
	Store Store
	// Scheme is the URL scheme the database was opened by (postgres, sqlite, mysql).
	Scheme string
	// Pool is the pgx pool of a postgres:// database, nil for others.
	Pool  *pgxpool.Pool
	close func()
}

// Close closes the pool OpenDB opened. It is safe to call more than once.
func (db *DB) Close() {
	if db.close != nil {
		db.close()
		db.close = nil
	}
}

// pingTimeout bounds the first contact with a database or broker, so that a
// daemon pointed at an unreachable address fails in seconds with the reason.
const pingTimeout = 10 * time.Second

const (
	// poolPingTimeout bounds the check that pgxpool makes of a connection
	// that sat idle before handing it out: without it, a connection to a
	// database that stopped answering holds its ping for up to a minute
	// after the caller gave up, and closing the pool waits for it.
	poolPingTimeout = 2 * time.Second
	// closeGrace is how long closing a pool waits for its connections to say
	// goodbye to the database before it closes their sockets.
	closeGrace = time.Second
)

// MySQL read, write and dial timeouts that the daemon adds to a mysql:// URL
// that names none (go-sql-driver's readTimeout, writeTimeout and timeout), so
// that no call hangs on a connection whose server stopped answering, even one
// made without a deadline. A migration of a very large table may need a
// longer readTimeout, or readTimeout=0 (none), in the URL of that run.
const (
	mysqlReadTimeout  = time.Minute
	mysqlWriteTimeout = 30 * time.Second
	mysqlDialTimeout  = pingTimeout
)

// dbOpener opens one kind of database. The URL's password must not reach the
// returned error: callers scrub it anyway.
type dbOpener func(ctx context.Context, dsn string, p DBParams) (*DB, error)

// dbOpeners is the scheme registry of databases. config.DBSchemes lists the
// same schemes for validation; a test keeps the two in step.
var dbOpeners = map[string]dbOpener{
	"postgres":   openPostgres,
	"postgresql": openPostgres,
	"sqlite":     openSQLite,
	"mysql":      openMySQL,
}

// OpenDB opens the database named by dsn (postgres://, postgresql://,
// sqlite://PATH or mysql://user:pass@host:3306/db) with a pool of at most
// p.MaxConns connections, checks that it answers within ctx and a 10 s bound,
// and returns the store on p.Table. The caller closes the DB. Errors never
// contain the URL's password.
func OpenDB(ctx context.Context, dsn config.Secret, p DBParams) (*DB, error) {
	if p.Table == "" {
		p.Table = config.DefaultTable
	}
	if p.MaxConns <= 0 {
		p.MaxConns = config.ConnsPerRelay + config.SpareConns
	}
	scheme := dsn.Scheme()
	open, ok := dbOpeners[scheme]
	if !ok {
		return nil, fmt.Errorf("open database: unknown scheme %q; want %s", scheme, schemes(dbOpeners))
	}
	if pg := scheme == "postgres" || scheme == "postgresql"; !pg && (p.Notify || p.NotifyTrigger || p.BatchLease || p.AsyncCommit || p.HeldClaims) {
		// config.Validate refuses these first; this catches a caller that
		// skipped it, rather than running without what it asked for.
		return nil, fmt.Errorf("open database: notify, notify_trigger, batch_lease, async_commit and held_claims apply to postgres:// only, not %s://", scheme)
	}
	if p.HeldClaims && p.BatchLease {
		// config.Validate refuses this first too; pgstore.New would, in its own words.
		return nil, errors.New("open database: held_claims and batch_lease are two ways of claiming; choose one")
	}
	db, err := open(ctx, dsn.Value(), p)
	if err != nil {
		return nil, scrub(fmt.Errorf("open %s database: %w", scheme, err), dsn)
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := db.Store.Ping(pctx); err != nil {
		db.Close()
		return nil, scrub(fmt.Errorf("open %s database: %w", scheme, err), dsn)
	}
	return db, nil
}

func openPostgres(ctx context.Context, dsn string, p DBParams) (*DB, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = int32(min(p.MaxConns, 1<<20))
	pc.MinConns = 0
	if _, ok := pc.ConnConfig.RuntimeParams["application_name"]; !ok {
		pc.ConnConfig.RuntimeParams["application_name"] = "outbox"
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = pingTimeout
	}
	pc.PingTimeout = poolPingTimeout
	conns := &connSet{open: make(map[*trackedConn]struct{})}
	pc.ConnConfig.DialFunc = conns.dialer(pc.ConnConfig.DialFunc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	closePool := func() { conns.closeWithin(pool.Close, closeGrace) }
	opts := []pgstore.Option{pgstore.WithTable(p.Table), pgstore.WithNotify(p.Notify),
		pgstore.WithNotifyTrigger(p.NotifyTrigger), pgstore.WithBatchLease(p.BatchLease),
		pgstore.WithAsyncCommit(p.AsyncCommit), pgstore.WithHeldClaims(p.HeldClaims)}
	if len(p.Columns) > 0 && !colmap.Map(p.Columns).LogOnly() {
		opts = append(opts, pgstore.WithColumns(p.Columns))
	}
	s, err := pgstore.New(pool, opts...)
	if err != nil {
		closePool()
		return nil, err
	}
	return &DB{Store: s, Scheme: "postgres", Pool: pool, close: closePool}, nil
}

// connSet tracks the open sockets of a pgx pool (its LISTEN connections and
// cancel requests included), so that closing the pool can end them when the
// database does not answer: pgx gives each connection 15 s to say goodbye
// and cancel its query, which a black-holed database would make the stop of
// the daemon wait for.
type connSet struct {
	mu   sync.Mutex
	open map[*trackedConn]struct{}
}

// dialer wraps dial (nil means pgx's default) so that its connections join s.
func (s *connSet) dialer(dial pgconn.DialFunc) pgconn.DialFunc {
	if dial == nil {
		d := &net.Dialer{KeepAlive: 5 * time.Minute}
		dial = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, set: s}
		s.mu.Lock()
		s.open[tc] = struct{}{}
		s.mu.Unlock()
		return tc, nil
	}
}

// closeWithin runs closePool, and if it has not returned after grace, closes
// every socket still open so that it does.
func (s *connSet) closeWithin(closePool func(), grace time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		closePool()
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	s.mu.Lock()
	open := slices.Collect(maps.Keys(s.open))
	s.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
	<-done
}

// trackedConn is a socket of a connSet; closing it leaves the set.
type trackedConn struct {
	net.Conn
	set *connSet
}

// Close closes the socket and forgets it.
func (c *trackedConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.open, c)
	c.set.mu.Unlock()
	return c.Conn.Close()
}

// sqlitePath is the file of a sqlite:// URL: what follows the scheme, so
// sqlite:///var/lib/x.db is absolute and sqlite://x.db relative.
func sqlitePath(dsn string) string {
	_, path, _ := strings.Cut(dsn, "://")
	return path
}

func openSQLite(_ context.Context, dsn string, p DBParams) (*DB, error) {
	db, err := sqlitestore.Open(sqlitePath(dsn))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(p.MaxConns)
	db.SetMaxIdleConns(p.MaxConns)
	opts := []sqlitestore.Option{sqlitestore.WithTable(p.Table)}
	if len(p.Columns) > 0 {
		opts = append(opts, sqlitestore.WithColumns(p.Columns))
	}
	s, err := sqlitestore.New(db, opts...)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &DB{Store: s, Scheme: "sqlite", close: func() { db.Close() }}, nil
}

// openMySQL opens mysql://user:pass@host:3306/db?param=value through
// mysqlstore.Open, which sets parseTime and a UTC session time zone and keeps
// the other parameters (the go-sql-driver's DSN parameters).
//
// It adds the read, write and dial timeouts mysqlReadTimeout,
// mysqlWriteTimeout and mysqlDialTimeout where the URL names none.
func openMySQL(_ context.Context, dsn string, p DBParams) (*DB, error) {
	dsn, err := withMySQLTimeouts(dsn)
	if err != nil {
		return nil, err
	}
	db, err := mysqlstore.Open(dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(p.MaxConns)
	db.SetMaxIdleConns(p.MaxConns)
	db.SetConnMaxLifetime(30 * time.Minute)
	opts := []mysqlstore.Option{mysqlstore.WithTable(p.Table)}
	if len(p.Columns) > 0 {
		opts = append(opts, mysqlstore.WithColumns(p.Columns))
	}
	s, err := mysqlstore.New(db, opts...)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &DB{Store: s, Scheme: "mysql", close: func() { db.Close() }}, nil
}

// withMySQLTimeouts returns the mysql:// URL dsn with the daemon's default
// timeouts added for those it does not name.
func withMySQLTimeouts(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", errors.New("not a valid mysql:// URL") // url's error would quote the password
	}
	q := u.Query()
	for key, d := range map[string]time.Duration{
		"readTimeout": mysqlReadTimeout, "writeTimeout": mysqlWriteTimeout, "timeout": mysqlDialTimeout} {
		if !q.Has(key) {
			q.Set(key, d.String())
		}
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
