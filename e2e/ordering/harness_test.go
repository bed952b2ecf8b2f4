// Package ordering_test checks per-aggregate ordering (outbox.WithOrdering)
// end to end on the real databases: several relays, each with a connection
// pool of its own as separate processes would have, share one table while a
// publisher wrapper fails, delays and refuses messages; the tests assert the
// order in which each aggregate's messages reach the broker and that unrelated
// aggregates keep flowing while one is blocked. It also holds the benchmark
// of ordering on against ordering off (bench_test.go) and a demonstration of
// the per-aggregate commit-order caveat and its fix (commitorder_test.go).
package ordering_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// storeAdmin is what a store offers the tests: the relay's view and the
// operator's (retry or discard a dead message).
type storeAdmin interface {
	outbox.Store
	outbox.Admin
}

// backend is one database with a migrated outbox table.
type backend struct {
	name string
	// store is a Store on the test's own pool (for writes, counts and operator actions).
	store storeAdmin
	// newStore returns a Store on a pool of its own, as another relay process would have.
	newStore func(t testing.TB) outbox.Store
	// write commits msgs in one transaction.
	write func(ctx context.Context, msgs ...*outbox.Message) error
	// count runs SELECT count(*) FROM outbox_message WHERE <where>.
	count func(ctx context.Context, where string) (int64, error)
	// exec runs a statement on the test's pool.
	exec func(ctx context.Context, query string, args ...any) error
	// begin opens a business transaction.
	begin func(ctx context.Context) (txn, error)
	// queryInt runs a query that returns one integer.
	queryInt func(ctx context.Context, query string) (int64, error)
}

// txn is a business transaction that writes outbox messages among its own statements.
type txn interface {
	exec(ctx context.Context, query string, args ...any) error
	write(ctx context.Context, msgs ...*outbox.Message) error
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
}

type pgTxn struct {
	tx pgx.Tx
	w  *outbox.Writer[pgx.Tx]
}

func (x pgTxn) exec(ctx context.Context, q string, args ...any) error {
	_, err := x.tx.Exec(ctx, q, args...)
	return err
}
func (x pgTxn) write(ctx context.Context, msgs ...*outbox.Message) error {
	return x.w.Write(ctx, x.tx, msgs...)
}
func (x pgTxn) commit(ctx context.Context) error   { return x.tx.Commit(ctx) }
func (x pgTxn) rollback(ctx context.Context) error { return x.tx.Rollback(ctx) }

type sqlTxn struct {
	tx *sql.Tx
	w  *outbox.Writer[*sql.Tx]
}

func (x sqlTxn) exec(ctx context.Context, q string, args ...any) error {
	_, err := x.tx.ExecContext(ctx, q, args...)
	return err
}
func (x sqlTxn) write(ctx context.Context, msgs ...*outbox.Message) error {
	return x.w.Write(ctx, x.tx, msgs...)
}
func (x sqlTxn) commit(context.Context) error   { return x.tx.Commit() }
func (x sqlTxn) rollback(context.Context) error { return x.tx.Rollback() }

type newBackend func(t testing.TB) *backend

// backends are the databases whose stores claim with SKIP LOCKED, where
// several relays really run side by side; SQLite (one writer) is covered by
// the root package's tests and storetest.
var backends = []struct {
	name string
	new  newBackend
}{{"postgres", postgresBackend}, {"mysql", mysqlBackend}}

func postgresBackend(t testing.TB) *backend {
	pool, _, dsn := testsvc.PostgresSchema(t)
	st, err := pgstore.New(pool)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(context.Background()))
	w := outbox.NewWriter[pgx.Tx](st)
	return &backend{
		name:  "postgres",
		store: st,
		newStore: func(t testing.TB) outbox.Store {
			cfg, err := pgxpool.ParseConfig(dsn)
			require.NoError(t, err)
			cfg.MaxConns = 2
			p, err := pgxpool.NewWithConfig(context.Background(), cfg)
			require.NoError(t, err)
			t.Cleanup(p.Close)
			s, err := pgstore.New(p)
			require.NoError(t, err)
			return s
		},
		write: func(ctx context.Context, msgs ...*outbox.Message) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
		},
		count: func(ctx context.Context, where string) (n int64, err error) {
			err = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_message WHERE "+where).Scan(&n)
			return n, err
		},
		exec: func(ctx context.Context, q string, args ...any) error {
			_, err := pool.Exec(ctx, q, args...)
			return err
		},
		begin: func(ctx context.Context) (txn, error) {
			tx, err := pool.Begin(ctx)
			return pgTxn{tx: tx, w: w}, err
		},
		queryInt: func(ctx context.Context, q string) (n int64, err error) {
			err = pool.QueryRow(ctx, q).Scan(&n)
			return n, err
		},
	}
}

func mysqlBackend(t testing.TB) *backend {
	db, dsn := testsvc.MySQLDatabase(t)
	st, err := mysqlstore.New(db)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(context.Background()))
	return &backend{
		name:  "mysql",
		store: st,
		newStore: func(t testing.TB) outbox.Store {
			d, err := sql.Open("mysql", dsn)
			require.NoError(t, err)
			d.SetMaxOpenConns(2)
			t.Cleanup(func() { d.Close() })
			s, err := mysqlstore.New(d)
			require.NoError(t, err)
			return s
		},
		write: sqlWrite(db, outbox.NewWriter[*sql.Tx](st)),
		count: sqlCount(db),
		exec: func(ctx context.Context, q string, args ...any) error {
			_, err := db.ExecContext(ctx, q, args...)
			return err
		},
		begin:    sqlBegin(db, outbox.NewWriter[*sql.Tx](st)),
		queryInt: sqlQueryInt(db),
	}
}

// sqliteBackend is used by the tests that need no concurrency between relays.
func sqliteBackend(t testing.TB) *backend {
	db, err := sqlitestore.Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	st, err := sqlitestore.New(db)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(context.Background()))
	return &backend{
		name:     "sqlite",
		store:    st,
		newStore: func(testing.TB) outbox.Store { return st },
		write:    sqlWrite(db, outbox.NewWriter[*sql.Tx](st)),
		count:    sqlCount(db),
		exec: func(ctx context.Context, q string, args ...any) error {
			_, err := db.ExecContext(ctx, q, args...)
			return err
		},
		begin:    sqlBegin(db, outbox.NewWriter[*sql.Tx](st)),
		queryInt: sqlQueryInt(db),
	}
}

func sqlBegin(db *sql.DB, w *outbox.Writer[*sql.Tx]) func(ctx context.Context) (txn, error) {
	return func(ctx context.Context) (txn, error) {
		tx, err := db.BeginTx(ctx, nil)
		return sqlTxn{tx: tx, w: w}, err
	}
}

func sqlWrite(db *sql.DB, w *outbox.Writer[*sql.Tx]) func(ctx context.Context, msgs ...*outbox.Message) error {
	return func(ctx context.Context, msgs ...*outbox.Message) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := w.Write(ctx, tx, msgs...); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
}

func sqlQueryInt(db *sql.DB) func(ctx context.Context, q string) (int64, error) {
	return func(ctx context.Context, q string) (n int64, err error) {
		err = db.QueryRowContext(ctx, q).Scan(&n)
		return n, err
	}
}

func sqlCount(db *sql.DB) func(ctx context.Context, where string) (int64, error) {
	return func(ctx context.Context, where string) (n int64, err error) {
		err = db.QueryRowContext(ctx, "SELECT count(*) FROM outbox_message WHERE "+where).Scan(&n)
		return n, err
	}
}

func (b *backend) mustQueryInt(t testing.TB, q string) int64 {
	t.Helper()
	n, err := b.queryInt(context.Background(), q)
	require.NoError(t, err)
	return n
}

func (b *backend) mustCount(t testing.TB, where string) int64 {
	t.Helper()
	n, err := b.count(context.Background(), where)
	require.NoError(t, err)
	return n
}

// body is the payload of every test message: its aggregate and its place in
// the aggregate's sequence, so the receiving side can check order without
// the database.
type body struct {
	Agg string `json:"agg"`
	Seq int    `json:"seq"`
}

// seqMsg is message seq (0-based) of aggregate agg.
func seqMsg(agg string, seq int) *outbox.Message {
	p, _ := json.Marshal(body{Agg: agg, Seq: seq})
	return &outbox.Message{AggregateType: "order", AggregateID: agg, EventType: "ORDER_EVENT", Payload: p}
}

// decode reads a test message's body. It runs on relay goroutines, so it
// reports a bad payload with Errorf rather than stopping the test.
func decode(t testing.TB, m *outbox.Message) body {
	t.Helper()
	var b body
	if err := json.Unmarshal(m.Payload, &b); err != nil {
		t.Errorf("payload %s: %v", m.Payload, err)
	}
	return b
}

// interleaved returns n messages spread round-robin over aggs aggregates, in
// the order a stream of business transactions would write them.
func interleaved(aggs, n int) []*outbox.Message {
	out := make([]*outbox.Message, n)
	next := make([]int, aggs)
	for i := range out {
		a := i % aggs
		out[i] = seqMsg(fmt.Sprintf("agg-%d", a), next[a])
		next[a]++
	}
	return out
}

// writeAll commits msgs in transactions of per messages.
func (b *backend) writeAll(t testing.TB, msgs []*outbox.Message, per int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < len(msgs); i += per {
		require.NoError(t, b.write(ctx, msgs[i:min(i+per, len(msgs))]...))
	}
}
