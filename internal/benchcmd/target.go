package benchcmd

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/claimindex"
	"github.com/outboxkit/outbox/internal/embeddednats"
	"github.com/outboxkit/outbox/internal/redact"
	"github.com/outboxkit/outbox/publisher/natspub"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// setupTimeout bounds connecting to the database and the broker.
const setupTimeout = 15 * time.Second

// database is the run's own outbox table in the database under test.
type database struct {
	kind  string // postgres, mysql or sqlite
	desc  string // for the report, without credentials
	table string // the table's name, made by the run: lower-case letters, digits, underscores
	store outbox.Store
	// relayStore returns the store of one outbox relay; nil means store.
	relayStore func() (outbox.Store, error)
	// sqlDB runs the textbook relay's statements and the run's own.
	sqlDB *sql.DB
	// pool is the PostgreSQL pool (nil on other databases): the reference loop's.
	pool *pgxpool.Pool
	// dsn is the PostgreSQL URL, for the cdc source's replication connection.
	dsn string
	// write inserts msgs in one transaction through the library's Writer.
	write func(ctx context.Context, msgs []*outbox.Message) error
	// bind is the placeholder of the statement's first parameter: $1 or ?.
	bind string
	// payloadText reads the payload column as text.
	payloadText string
	// analyze refreshes the planner's statistics after a preload ("" for none).
	analyze string
	// keptUpTo is the last row of the sent rows the table keeps through
	// every test (Config.SentRows); 0 for none.
	keptUpTo int64
	closers  []func()
}

// close drops the table and closes what openDatabase opened.
func (d *database) close() {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if d.sqlDB != nil {
		_, _ = d.sqlDB.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.table)
		// The table of relays that ordered relays heartbeat in (Membership);
		// the bench's table names are short enough to need no hashing.
		_, _ = d.sqlDB.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.table+"_relays")
		if d.kind == "postgres" {
			_, _ = d.sqlDB.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.table+"_lease") // pgstore.WithBatchLease's
		}
	}
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// clear deletes every row but the sent rows kept (markSent), between tests.
func (d *database) clear(ctx context.Context) error {
	if _, err := d.sqlDB.ExecContext(ctx, "DELETE FROM "+d.table+" WHERE id > "+d.bind, d.keptUpTo); err != nil {
		return fmt.Errorf("clear table %s: %w", d.table, err)
	}
	return nil
}

// markSent marks every row sent (status 1) and keeps them: clear deletes
// only the rows written after them.
func (d *database) markSent(ctx context.Context) error {
	if _, err := d.sqlDB.ExecContext(ctx, "UPDATE "+d.table+" SET status = 1 WHERE status = 0"); err != nil {
		return fmt.Errorf("mark the sent rows of %s: %w", d.table, err)
	}
	if err := d.sqlDB.QueryRowContext(ctx, "SELECT COALESCE(max(id), 0) FROM "+d.table).Scan(&d.keptUpTo); err != nil {
		return fmt.Errorf("read the last sent row of %s: %w", d.table, err)
	}
	return d.refreshStats(ctx)
}

// refreshStats refreshes the planner's statistics of the table, after a
// preload (on PostgreSQL also a VACUUM, as autovacuum would have done to a
// table that kept its rows for a while).
func (d *database) refreshStats(ctx context.Context) error {
	if d.analyze == "" {
		return nil
	}
	if _, err := d.sqlDB.ExecContext(ctx, d.analyze); err != nil {
		return fmt.Errorf("%s: %w", d.analyze, err)
	}
	return nil
}

// contractIndexes drops the indexes Migrate adds for claims, leaving the
// contract's (Config.ContractIndexes); claimindex.Drop checks that the
// store then misses them.
func (d *database) contractIndexes(ctx context.Context) error {
	ic, ok := d.store.(outbox.IndexChecker)
	if !ok {
		return fmt.Errorf("leave only the contract's indexes: the %s store does not list missing indexes", d.kind)
	}
	return claimindex.Drop(ctx, d.kind, d.table, func(ctx context.Context, q string) error {
		_, err := d.sqlDB.ExecContext(ctx, q)
		return err
	}, ic)
}

// pending counts the rows not yet sent.
func (d *database) pending(ctx context.Context) (int64, error) {
	var n int64
	err := d.sqlDB.QueryRowContext(ctx, "SELECT count(*) FROM "+d.table+" WHERE status = 0").Scan(&n)
	return n, err
}

// openDatabase opens the database of cfg (SQLite in dir by default) and
// creates the table.
func openDatabase(ctx context.Context, cfg Config, dir, table string) (_ *database, err error) {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	d := &database{table: table}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	raw := cfg.DB
	if raw == "" {
		raw = "sqlite://" + filepath.Join(dir, "bench.db")
	}
	d.kind, err = dbKind(raw)
	if err != nil {
		return nil, err
	}
	// Connections: per relay, a claim and one acknowledgement per batch in
	// flight and a listener (with held claims, each batch in flight holds
	// its connection from the claim until it is settled, which this covers);
	// the writers; the run's own statements.
	conns := cfg.Relays*(cfg.MaxInFlight+2) + cfg.Writers + 2
	switch d.kind {
	case "postgres":
		err = d.openPostgres(ctx, cfg, raw, conns)
	case "mysql":
		err = d.openMySQL(raw, conns)
	default:
		err = d.openSQLite(raw, cfg.DB == "")
	}
	if err != nil {
		return nil, err
	}
	if m, ok := d.store.(outbox.Migrator); ok {
		if err := m.Migrate(ctx); err != nil {
			return nil, fmt.Errorf("create table %s: %w", table, err)
		}
	}
	if cfg.ContractIndexes {
		if err := d.contractIndexes(ctx); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (d *database) openPostgres(ctx context.Context, cfg Config, raw string, conns int) error {
	pcfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return fmt.Errorf("db %s: %w", redact.URLs(raw), err)
	}
	pcfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("db %s: %w", redact.URLs(raw), err)
	}
	d.closers = append(d.closers, pool.Close)
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("db %s: %w", redact.URLs(raw), err)
	}
	opts := []pgstore.Option{pgstore.WithTable(d.table), pgstore.WithNotify(!cfg.NoNotify),
		pgstore.WithNotifyInterval(max(cfg.NotifyInterval, 0)),
		pgstore.WithAsyncCommit(cfg.AsyncCommit), pgstore.WithBatchLease(cfg.BatchLease),
		pgstore.WithHeldClaims(cfg.HeldClaims)}
	st, err := pgstore.New(pool, opts...)
	if err != nil {
		return err
	}
	// A Store of its own for each relay, as each relay process has: a Store
	// keeps where its next claim starts.
	d.relayStore = func() (outbox.Store, error) { return pgstore.New(pool, opts...) }
	var wopts []outbox.WriterOption
	if cfg.WriterDeletes {
		wopts = append(wopts, outbox.WithDeleteAfterInsert())
	}
	w := outbox.NewWriter(st, wopts...)
	d.desc = "PostgreSQL at " + redact.URLs(raw)
	d.store, d.pool, d.dsn = st, pool, raw
	d.sqlDB = stdlib.OpenDBFromPool(pool)
	d.closers = append(d.closers, func() { d.sqlDB.Close() })
	d.write = func(ctx context.Context, msgs []*outbox.Message) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
	}
	d.bind, d.payloadText, d.analyze = "$1", "payload::text", "VACUUM ANALYZE "+d.table
	return nil
}

func (d *database) openMySQL(raw string, conns int) error {
	db, err := mysqlstore.Open(raw)
	if err != nil {
		return fmt.Errorf("db %s: %w", redact.URLs(raw), err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	d.closers = append(d.closers, func() { db.Close() })
	st, err := mysqlstore.New(db, mysqlstore.WithTable(d.table))
	if err != nil {
		return err
	}
	// A Store of its own for each relay, as each relay process has: a Store
	// keeps what it learnt of the table's aggregates for ordered claims.
	d.relayStore = func() (outbox.Store, error) { return mysqlstore.New(db, mysqlstore.WithTable(d.table)) }
	d.desc = "MySQL at " + redact.URLs(raw)
	d.useSQL(db, st, outbox.NewWriter[*sql.Tx](st), nil)
	d.bind, d.payloadText, d.analyze = "?", "CAST(payload AS CHAR)", "ANALYZE TABLE "+d.table
	return nil
}

func (d *database) openSQLite(raw string, embedded bool) error {
	path := strings.TrimPrefix(raw, "sqlite://")
	db, err := sqlitestore.Open(path)
	if err != nil {
		return fmt.Errorf("db %s: %w", raw, err)
	}
	d.closers = append(d.closers, func() { db.Close() })
	st, err := sqlitestore.New(db, sqlitestore.WithTable(d.table))
	if err != nil {
		return err
	}
	d.desc = "SQLite at " + path
	if embedded {
		d.desc = "SQLite in a temporary folder"
	}
	// The writers queue with the relay's writes, as a service on SQLite
	// should.
	d.useSQL(db, st, outbox.NewWriter[*sql.Tx](st), st.Tx)
	d.bind, d.payloadText = "?", "payload"
	return nil
}

// useSQL sets the store and writer of a database/sql database: each write
// is w's, in a transaction of inTx, or of db when inTx is nil.
func (d *database) useSQL(db *sql.DB, st outbox.Store, w *outbox.Writer[*sql.Tx],
	inTx func(ctx context.Context, f func(*sql.Tx) error) error) {
	if inTx == nil {
		inTx = func(ctx context.Context, f func(*sql.Tx) error) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := f(tx); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}
	}
	d.store, d.sqlDB = st, db
	d.write = func(ctx context.Context, msgs []*outbox.Message) error {
		return inTx(ctx, func(tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) })
	}
}

// broker is the NATS JetStream server under test and the run's stream on it.
type broker struct {
	desc    string
	srv     *server.Server // the embedded server, nil for a given one
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subject string // prefix of the run's subjects, ending in "."
}

// openBroker starts an embedded server in dir when raw is empty, connects,
// and creates the run's stream.
func openBroker(ctx context.Context, raw, dir, name string, maxPending int) (_ *broker, err error) {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	b := &broker{stream: strings.ToUpper(name), subject: name + "."}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if raw == "" {
		if b.srv, err = embeddednats.Run("outbox-bench", filepath.Join(dir, "nats")); err != nil {
			return nil, err
		}
		raw = b.srv.ClientURL()
		b.desc = "embedded NATS JetStream " + server.VERSION
	} else {
		b.desc = "NATS JetStream at " + redact.URLs(raw)
	}
	b.nc, err = nats.Connect(raw, nats.Name("outbox bench"), nats.Timeout(5*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("broker %s: %w", redact.URLs(raw), err)
	}
	if b.js, err = jetstream.New(b.nc, jetstream.WithPublishAsyncMaxPending(maxPending)); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if err := natspub.EnsureStream(ctx, b.js, b.stream, []string{b.subject + ">"}, 0); err != nil {
		return nil, fmt.Errorf("broker %s: %w", redact.URLs(raw), err)
	}
	return b, nil
}

// publisher returns a new publisher to the run's stream.
func (b *broker) publisher() (outbox.Publisher, error) {
	return natspub.New(b.js, natspub.WithSubjectPrefix(b.subject))
}

// stored returns how many messages the stream holds.
func (b *broker) stored(ctx context.Context) (uint64, error) {
	s, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// purge empties the stream, between tests.
func (b *broker) purge(ctx context.Context) error {
	s, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		return fmt.Errorf("purge stream %s: %w", b.stream, err)
	}
	if err := s.Purge(ctx); err != nil {
		return fmt.Errorf("purge stream %s: %w", b.stream, err)
	}
	return nil
}

// close deletes the stream and stops what openBroker started.
func (b *broker) close() {
	if b.js != nil {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		_ = b.js.DeleteStream(ctx, b.stream)
		cancel()
	}
	if b.nc != nil {
		b.nc.Close()
	}
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
}
