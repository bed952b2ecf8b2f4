package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// dialects lists every database the inbox supports, for tests that run on each.
var dialects = []inbox.Dialect{inbox.Postgres, inbox.MySQL, inbox.SQLite}

// testDB is one test's own database: open returns another handle on it, as a
// second consumer process would have.
type testDB struct {
	dialect inbox.Dialect
	db      *sql.DB
	open    func() *sql.DB
}

func newTestDB(t testing.TB, d inbox.Dialect) *testDB {
	t.Helper()
	var open func() *sql.DB
	var db *sql.DB
	switch d {
	case inbox.Postgres:
		pool, _, dsn := testsvc.PostgresSchema(t)
		db = stdlib.OpenDBFromPool(pool)
		open = func() *sql.DB { return openSQL(t, "pgx", dsn, 8) }
	case inbox.MySQL:
		var dsn string
		db, dsn = testsvc.MySQLDatabase(t)
		open = func() *sql.DB { return openSQL(t, "mysql", dsn, 8) }
	case inbox.SQLite:
		dsn := "file:" + testsvc.SQLitePath(t) + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
		db = openSQL(t, "sqlite", dsn, 4)
		open = func() *sql.DB { return openSQL(t, "sqlite", dsn, 4) }
	}
	t.Cleanup(func() { db.Close() })
	tdb := &testDB{dialect: d, db: db, open: open}
	ctx := context.Background()
	idType := "VARCHAR(255)"
	if d == inbox.MySQL {
		idType = "VARBINARY(255)" // compare ids byte for byte, as the inbox does
	}
	_, err := db.ExecContext(ctx, "CREATE TABLE effect (message_id "+idType+" NOT NULL, instance INTEGER NOT NULL)")
	require.NoError(t, err)
	return tdb
}

func openSQL(t testing.TB, driver, dsn string, conns int) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	db.SetMaxOpenConns(conns)
	t.Cleanup(func() { db.Close() })
	return db
}

// ph returns the dialect's n-th placeholder, for the tests' own SQL.
func (tdb *testDB) ph(n int) string {
	if tdb.dialect == inbox.Postgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// newInbox returns a migrated inbox on db.
func newInbox(t testing.TB, db *sql.DB, d inbox.Dialect, opts ...inbox.Option) *inbox.Inbox {
	t.Helper()
	in, err := inbox.New(db, d, opts...)
	require.NoError(t, err)
	require.NoError(t, in.Migrate(context.Background()))
	return in
}

// effectHandler records one effect row per run, in the inbox's transaction.
func (tdb *testDB) effectHandler(instance int) inbox.Handler {
	q := "INSERT INTO effect (message_id, instance) VALUES (" + tdb.ph(1) + ", " + tdb.ph(2) + ")"
	return func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
		_, err := tx.ExecContext(ctx, q, m.MessageID, instance)
		return err
	}
}

// effects returns how many effect rows each message id has.
func (tdb *testDB) effects(t testing.TB) map[string]int {
	t.Helper()
	rows, err := tdb.db.QueryContext(context.Background(), "SELECT message_id, COUNT(*) FROM effect GROUP BY message_id")
	require.NoError(t, err)
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		got[id] = n
	}
	require.NoError(t, rows.Err())
	return got
}

// inboxRows counts the inbox rows of a consumer.
func (tdb *testDB) inboxRows(t testing.TB, consumer string) int {
	t.Helper()
	var n int
	err := tdb.db.QueryRowContext(context.Background(),
		"SELECT COUNT(*) FROM "+inbox.DefaultTable+" WHERE consumer = "+tdb.ph(1), consumer).Scan(&n)
	require.NoError(t, err)
	return n
}

func message(id string) *outbox.Message {
	return &outbox.Message{MessageID: id, AggregateType: "order", AggregateID: "o-" + id, EventType: "ORDER_PAID",
		Payload: []byte(`{}`)}
}

// redisClient returns a client on the test Redis (or on addr when given).
func redisClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(testsvc.RedisURL(t))
	require.NoError(t, err)
	if addr != "" {
		opt.Addr = addr
	}
	opt.MaxRetries = -1
	opt.DialTimeout = 200 * time.Millisecond
	opt.ReadTimeout = 200 * time.Millisecond
	opt.WriteTimeout = 200 * time.Millisecond
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// deleteKeys deletes every key under prefix: the test's own "FLUSHALL".
func deleteKeys(t testing.TB, rdb *redis.Client, prefix string) int {
	t.Helper()
	ctx := context.Background()
	var n int
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		require.NoError(t, rdb.Del(ctx, iter.Val()).Err())
		n++
	}
	require.NoError(t, iter.Err())
	return n
}

// tally is a Hook that counts outcomes.
type tally struct{ processed, duplicate, fast, failed atomic.Int64 }

func (c *tally) OnProcess(ev inbox.Event) {
	switch {
	case ev.Err != nil:
		c.failed.Add(1)
	case ev.Outcome == inbox.Processed:
		c.processed.Add(1)
	case ev.Outcome == inbox.Duplicate:
		c.duplicate.Add(1)
		if ev.FastPath {
			c.fast.Add(1)
		}
	}
}
