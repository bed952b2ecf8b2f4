package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/redact"
	"github.com/outboxkit/outbox/publisher/natspub"
	"github.com/outboxkit/outbox/store/pgcdc"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// Sizes of the PostgreSQL pools: the payment services' (which take the
// orders on all three paths), the shipping services' (one connection per
// worker) and the relay's.
const (
	paymentConns  = 24
	shippingConns = 3 * shippingWorkers
	relayConns    = 2
)

// relayOptions are the relay's settings for the demo: defaults tuned for a
// run of a few seconds. The publish timeout is the hand-written paths' own,
// and the relay retries until it delivers: with a 1 s backoff cap, 50
// attempts outlast the drain timeout, so no message dies during a demo.
func relayOptions(cfg Config, hook any) []outbox.RelayOption {
	return []outbox.RelayOption{
		outbox.WithName("demo"),
		outbox.WithPollInterval(200 * time.Millisecond),
		outbox.WithPublishTimeout(PublishTimeout),
		outbox.WithLease(5 * time.Second),
		outbox.WithBackoff(100*time.Millisecond, time.Second),
		outbox.WithProbeInterval(250*time.Millisecond, time.Second),
		outbox.WithMaxAttempts(50),
		outbox.WithLogger(cfg.Logger),
		outbox.WithHooks(hook),
	}
}

// setup creates the temporary folder, starts the broker, opens the databases
// and builds the three paths with their tables, streams and consumers.
// Everything it creates is registered for close.
func (r *runner) setup(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "outbox-demo-")
	if err != nil {
		return err
	}
	r.dir = dir
	if r.broker, err = startBroker(r.cfg.Broker, dir, r.cfg.Logger); err != nil {
		return err
	}
	if r.d == postgresDialect {
		if r.payPool, err = r.openPool(ctx, paymentConns); err != nil {
			return err
		}
		shipPool, err := r.openPool(ctx, shippingConns)
		if err != nil {
			return err
		}
		r.payDB, r.shipDB = r.sqlDB(r.payPool), r.sqlDB(shipPool)
	}
	for _, k := range pathKinds {
		p, err := r.newPath(ctx, k)
		if err != nil {
			return fmt.Errorf("%s path: %w", k.key(), err)
		}
		r.paths = append(r.paths, p)
	}
	return nil
}

// newPath builds one path: its database tables, stream, shipping service,
// and either a connection through the proxy (hand-written paths) or the
// store, writer and relay (outbox path).
func (r *runner) newPath(ctx context.Context, k pathKind) (*path, error) {
	prefix := "outbox_demo_" + r.id + "_" + k.ident()
	p := &path{
		kind:    k,
		d:       r.d,
		t:       newServiceTables(prefix, k == viaOutbox),
		stream:  strings.ToUpper(prefix),
		subject: "outbox_demo." + r.id + "." + k.ident() + ".order_paid",
		log:     r.cfg.Logger.With("path", k.key()),
	}
	// Each service has a database of its own (on PostgreSQL, a pool of its
	// own on the one database), so that none queues behind another's load.
	var shipDB *sql.DB
	if r.d == postgresDialect {
		p.db, shipDB = r.payDB, r.shipDB
		r.onCleanup(func(ctx context.Context) error { return dropTables(ctx, p.db, p.t.all()) })
	} else { // the files go with the temporary folder
		var err error
		if p.db, err = r.openSQLite(k.ident() + "_payments.db"); err != nil {
			return nil, err
		}
		if shipDB, err = r.openSQLite(k.ident() + "_shipping.db"); err != nil {
			return nil, err
		}
	}
	if err := createOrders(ctx, p.db, p.d, p.t.orders, r.cfg.Orders); err != nil {
		return nil, err
	}
	if err := createShipments(ctx, shipDB, p.t.shipments); err != nil {
		return nil, err
	}

	if err := natspub.EnsureStream(ctx, r.broker.js, p.stream, []string{"outbox_demo." + r.id + "." + k.ident() + ".>"}, 0); err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	r.onCleanup(func(ctx context.Context) error { return r.broker.js.DeleteStream(ctx, p.stream) })
	cons, err := r.broker.js.CreateOrUpdateConsumer(ctx, p.stream, jetstream.ConsumerConfig{
		Durable:       "shipping",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 1000,
	})
	if err != nil {
		return nil, fmt.Errorf("shipping consumer: %w", err)
	}
	dialect := inbox.SQLite
	if r.d == postgresDialect {
		dialect = inbox.Postgres
	}
	in, err := inbox.New(shipDB, dialect, inbox.WithTable(p.t.inbox), inbox.WithConsumer("shipping"),
		inbox.WithLogger(p.log))
	if err != nil {
		return nil, err
	}
	if err := in.Migrate(ctx); err != nil {
		return nil, err
	}
	p.ship = &shipping{db: shipDB, d: p.d, t: p.t, inbox: in, cons: cons, log: p.log, delivered: map[string]bool{}}

	if k != viaOutbox {
		if _, p.js, err = r.broker.dial(k.key()); err != nil {
			return nil, err
		}
		return p, nil
	}
	return p, r.newRelay(ctx, p)
}

// openPool opens a PostgreSQL pool of at most conns connections on
// Config.DB, closed by close.
func (r *runner) openPool(ctx context.Context, conns int32) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(r.cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("db: %w", err)
	}
	pcfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("db %s: %w", redact.URLs(r.cfg.DB), err)
	}
	r.pools = append(r.pools, pool)
	if err := pool.Ping(ctx); err != nil {
		return nil, fmt.Errorf("db %s: %w", redact.URLs(r.cfg.DB), err)
	}
	return pool, nil
}

// sqlDB returns a database/sql handle on pool, closed by close.
func (r *runner) sqlDB(pool *pgxpool.Pool) *sql.DB {
	db := stdlib.OpenDBFromPool(pool)
	r.dbs = append(r.dbs, db)
	return db
}

// openSQLite opens a database file in the run's folder with sqlitestore's
// settings but one: synchronous=NORMAL instead of FULL. The files are
// deleted when the run ends, so a commit need not survive a power cut (with
// WAL it still survives a crash of the process), and sparing an fsync per
// commit keeps the demo's pace on a slow or busy disk. It keeps one
// connection: SQLite lets one writer in at a time, and database/sql queues
// the others without the busy-waiting of several connections.
func (r *runner) openSQLite(name string) (*sql.DB, error) {
	dsn, err := sqlitestore.DSN(filepath.Join(r.dir, name))
	if err != nil {
		return nil, err
	}
	dsn = strings.Replace(dsn, "_pragma=synchronous(FULL)", "_pragma=synchronous(NORMAL)", 1)
	db, err := sql.Open(sqlitestore.DriverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	db.SetMaxOpenConns(1)
	r.dbs = append(r.dbs, db)
	if err := db.Ping(); err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return db, nil
}

// newRelay gives the outbox path its writer and its relay, which publishes
// through the fault proxy like the hand-written paths. On PostgreSQL the
// relay has a pool of its own, as a relay process (or the daemon) would, so
// that it never queues behind the payment service's transactions. On SQLite
// it shares the payment service's connection: SQLite lets one writer in at a
// time, and a second connection would wait in SQLite's busy loop, losing the
// lock to the busy payment service again and again.
func (r *runner) newRelay(ctx context.Context, p *path) error {
	if r.d == postgresDialect {
		s, err := pgstore.New(r.payPool, pgstore.WithTable(p.t.outbox))
		if err != nil {
			return err
		}
		if err := s.Migrate(ctx); err != nil {
			return err
		}
		p.writer = outbox.NewWriter(s.SQLTx())
		relayPool, err := r.openPool(ctx, relayConns)
		if err != nil {
			return err
		}
		if p.store, err = pgstore.New(relayPool, pgstore.WithTable(p.t.outbox)); err != nil {
			return err
		}
		if r.cfg.CDC {
			if err := r.newCDC(ctx, p, relayPool); err != nil {
				return err
			}
		}
	} else {
		s, err := sqlitestore.New(p.db, sqlitestore.WithTable(p.t.outbox))
		if err != nil {
			return err
		}
		if err := s.Migrate(ctx); err != nil {
			return err
		}
		p.writer = outbox.NewWriter[*sql.Tx](s)
		// A Store of its own for the relay: sqlitestore's column detection
		// holds the Store's lock while it waits for a connection, so a
		// Store shared with the writer deadlocks on a one-connection pool
		// (a claim waiting for the connection that a payment holds while
		// it waits for the lock).
		if p.store, err = sqlitestore.New(p.db, sqlitestore.WithTable(p.t.outbox)); err != nil {
			return err
		}
	}
	_, js, err := r.broker.dial("relay")
	if err != nil {
		return err
	}
	pub, err := natspub.New(js)
	if err != nil {
		return err
	}
	p.relay, err = outbox.NewRelay(p.store, pub, relayOptions(r.cfg, p)...)
	return err
}

// newCDC makes the outbox path's relay read the table's inserts from the
// write-ahead log: it sets up the table's publication, slot and mark table
// before any payment (as `outbox migrate --cdc` does), drops them at the
// end, and puts a pgcdc.Source, polling the table as its fallback, in
// front of the path's store.
func (r *runner) newCDC(ctx context.Context, p *path, pool *pgxpool.Pool) error {
	slot, pub := pgcdc.SlotName(p.t.outbox), pgcdc.PublicationName(p.t.outbox)
	var res pgcdc.SetupResult // cleaned up also when Setup made only part of it
	r.onCleanup(func(ctx context.Context) error { return dropCDC(ctx, r.cfg.DB, slot, pub, res.CreatedMarkTable) })
	res, err := pgcdc.Setup(ctx, pool, p.t.outbox, slot, pub)
	if err != nil {
		return fmt.Errorf("cdc: %w", err)
	}
	src, err := pgcdc.New(pool, r.cfg.DB, pgcdc.WithTable(p.t.outbox), pgcdc.WithSlot(slot), pgcdc.WithPublication(pub),
		pgcdc.WithFallback(p.store), pgcdc.WithLogger(r.cfg.Logger))
	if err != nil {
		return err
	}
	p.store, p.cdc = src, src
	return nil
}

// dropCDC drops what newCDC set up, as `outbox cdc drop-slot` does, and the
// mark table when the demo created it and no other slot has a mark in it,
// so that the demo leaves the schema as it found it.
func dropCDC(ctx context.Context, dsn, slot, pub string, dropMarks bool) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	for { // the server may count the slot active for a moment after the relay stopped
		err = pgcdc.DropSlot(ctx, c, slot, pub)
		if errors.Is(err, pgcdc.ErrSlotNotFound) { // DropSlot then leaves the publication
			_, err = c.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{pub}.Sanitize())
		}
		if err == nil {
			break
		}
		if !errors.Is(err, pgcdc.ErrSlotActive) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !dropMarks {
		return nil
	}
	mark := pgx.Identifier{pgcdc.MarkTable}.Sanitize()
	var others bool
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+mark+")").Scan(&others); err != nil || others {
		return err
	}
	_, err = c.Exec(ctx, "DROP TABLE IF EXISTS "+mark)
	return err
}
