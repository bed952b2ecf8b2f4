package e2e_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/natspub"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// backend is one database with a migrated outbox table.
type backend struct {
	name  string // "postgres", "mysql" or "sqlite"
	dsn   string // for child processes
	table string
	// now is the SQL expression of the current time as the store writes
	// next_retry_at (in UTC), for conditions such as "leased".
	now   string
	store outbox.Store
	// write runs one transaction that writes msgs and commits (or rolls back).
	write func(ctx context.Context, commit bool, msgs ...*outbox.Message) error
	// tx runs fn in one transaction, handing it the Writer bound to that transaction, and commits if fn returns nil.
	tx func(ctx context.Context, fn func(write func(msgs ...*outbox.Message) error) error) error
	// count runs SELECT count(*) FROM table WHERE <where>.
	count func(ctx context.Context, where string) (int64, error)
	exec  func(ctx context.Context, sql string) error
	// rows runs a query and returns every row's values, for diagnostics.
	rows func(ctx context.Context, sql string) ([][]any, error)
}

type backendFunc func(t *testing.T, contractOnly bool) *backend

var backends = map[string]backendFunc{"postgres": postgresBackend, "mysql": mysqlBackend, "sqlite": sqliteBackend}

// leased is the condition of a row that a relay holds: claimed, lease not yet over.
func (b *backend) leased() string {
	return "status = 0 AND next_retry_at > " + b.now
}

// contractDDL creates a table with only the table contract's columns, as a team's
// hand-made table would have.
const contractPG = `CREATE TABLE %s (
  id bigserial PRIMARY KEY, message_id varchar(64) NOT NULL UNIQUE,
  aggregate_type varchar(64) NOT NULL, aggregate_id varchar(64) NOT NULL, event_type varchar(64) NOT NULL,
  payload jsonb NOT NULL, status smallint NOT NULL DEFAULT 0, retry_count int NOT NULL DEFAULT 0,
  next_retry_at timestamptz NULL, created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON %[1]s (status, next_retry_at); CREATE INDEX ON %[1]s (aggregate_type, aggregate_id)`

func postgresBackend(t *testing.T, contractOnly bool) *backend {
	pool, _, dsn := testsvc.PostgresSchema(t)
	ctx := context.Background()
	table := "outbox_message"
	if contractOnly {
		table = "team_outbox"
		_, err := pool.Exec(ctx, fmt.Sprintf(contractPG, table))
		require.NoError(t, err)
	}
	st, err := pgstore.New(pool, pgstore.WithTable(table))
	require.NoError(t, err)
	if !contractOnly {
		require.NoError(t, st.Migrate(ctx))
	}
	w := outbox.NewWriter[pgx.Tx](st, outbox.WithWriterMaxPayloadSize(4<<20))
	return (&backend{
		name: "postgres", dsn: dsn, table: table, store: st, now: "now()",
		tx: func(ctx context.Context, fn func(write func(msgs ...*outbox.Message) error) error) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return fn(func(msgs ...*outbox.Message) error { return w.Write(ctx, tx, msgs...) })
			})
		},
		count: func(ctx context.Context, where string) (n int64, err error) {
			err = pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE "+where).Scan(&n)
			return n, err
		},
		exec: func(ctx context.Context, q string) error { _, err := pool.Exec(ctx, q); return err },
		rows: func(ctx context.Context, q string) ([][]any, error) {
			rows, err := pool.Query(ctx, q)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		},
	}).withWrite()
}

const contractSQLite = `CREATE TABLE %s (
  id INTEGER PRIMARY KEY AUTOINCREMENT, message_id VARCHAR(64) NOT NULL UNIQUE,
  aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL,
  payload TEXT NOT NULL, status SMALLINT NOT NULL DEFAULT 0, retry_count INT NOT NULL DEFAULT 0,
  next_retry_at DATETIME NULL, created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP);
CREATE INDEX %[1]s_status ON %[1]s (status, next_retry_at); CREATE INDEX %[1]s_agg ON %[1]s (aggregate_type, aggregate_id)`

func sqliteBackend(t *testing.T, contractOnly bool) *backend {
	path := testsvc.SQLitePath(t)
	db, err := sqlitestore.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	table := "outbox_message"
	if contractOnly {
		table = "team_outbox"
		_, err := db.ExecContext(ctx, fmt.Sprintf(contractSQLite, table))
		require.NoError(t, err)
	}
	st, err := sqlitestore.New(db, sqlitestore.WithTable(table))
	require.NoError(t, err)
	if !contractOnly {
		require.NoError(t, st.Migrate(ctx))
	}
	w := outbox.NewWriter[*sql.Tx](st, outbox.WithWriterMaxPayloadSize(4<<20))
	return (&backend{
		name: "sqlite", dsn: "sqlite://" + path, table: table, store: st,
		now:   "strftime('%Y-%m-%d %H:%M:%f', 'now')",
		tx:    sqlTx(db, w),
		count: sqlCount(db, table),
		exec:  func(ctx context.Context, q string) error { _, err := db.ExecContext(ctx, q); return err },
		rows:  func(ctx context.Context, q string) ([][]any, error) { return sqlRows(ctx, db, q) },
	}).withWrite()
}

// contractMySQL is the outbox table as teams paste it from the well-known
// MySQL write-ups: whole-second DATETIME columns with CURRENT_TIMESTAMP
// defaults, a JSON payload, InnoDB and utf8mb4, and none of our own columns or
// indexes (no headers, no last_error, no (status, id) index).
const contractMySQL = `CREATE TABLE %s (
  id             BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
  message_id     VARCHAR(64) NOT NULL COMMENT 'global id for consumer dedup',
  aggregate_type VARCHAR(64) NOT NULL,
  aggregate_id   VARCHAR(64) NOT NULL,
  event_type     VARCHAR(64) NOT NULL,
  payload        JSON NOT NULL,
  status         TINYINT NOT NULL DEFAULT 0 COMMENT '0 pending, 1 sent, 2 failed',
  retry_count    INT NOT NULL DEFAULT 0,
  next_retry_at  DATETIME NULL,
  created_at     DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at     DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  INDEX idx_status_next_retry (status, next_retry_at),
  INDEX idx_aggregate (aggregate_type, aggregate_id),
  UNIQUE KEY uk_message_id (message_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`

// mysqlBackend is a MariaDB/MySQL database of the test's own. The store's
// *sql.DB comes from mysqlstore.Open (UTC session), and child relays get the
// same database as a mysql:// URL, the form `outbox relay --db` takes.
func mysqlBackend(t *testing.T, contractOnly bool) *backend {
	_, dsn := testsvc.MySQLDatabase(t)
	db, err := mysqlstore.Open(dsn)
	require.NoError(t, err)
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	table := "outbox_message"
	if contractOnly {
		table = "team_outbox"
		_, err := db.ExecContext(ctx, fmt.Sprintf(contractMySQL, table))
		require.NoError(t, err)
	}
	st, err := mysqlstore.New(db, mysqlstore.WithTable(table))
	require.NoError(t, err)
	if !contractOnly {
		require.NoError(t, st.Migrate(ctx))
	}
	w := outbox.NewWriter[*sql.Tx](st, outbox.WithWriterMaxPayloadSize(4<<20))
	return (&backend{
		name: "mysql", dsn: mysqlURL(t, dsn), table: table, store: st, now: "UTC_TIMESTAMP(6)",
		tx:    sqlTx(db, w),
		count: sqlCount(db, table),
		exec:  func(ctx context.Context, q string) error { _, err := db.ExecContext(ctx, q); return err },
		rows:  func(ctx context.Context, q string) ([][]any, error) { return sqlRows(ctx, db, q) },
	}).withWrite()
}

// mysqlURL turns a go-sql-driver DSN over TCP into the mysql://user:pass@host:port/db URL.
func mysqlURL(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	require.Equal(t, "tcp", cfg.Net, "child relays reach MySQL over TCP; OUTBOX_TEST_MYSQL is %s", cfg.Net)
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	} else {
		u.User = url.User(cfg.User)
	}
	return u.String()
}

// sqlTx runs fn in one database/sql transaction with w bound to it.
func sqlTx(db *sql.DB, w *outbox.Writer[*sql.Tx]) func(ctx context.Context, fn func(write func(msgs ...*outbox.Message) error) error) error {
	return func(ctx context.Context, fn func(write func(msgs ...*outbox.Message) error) error) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(func(msgs ...*outbox.Message) error { return w.Write(ctx, tx, msgs...) }); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
}

func sqlCount(db *sql.DB, table string) func(ctx context.Context, where string) (int64, error) {
	return func(ctx context.Context, where string) (n int64, err error) {
		err = db.QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE "+where).Scan(&n)
		return n, err
	}
}

var errRollback = fmt.Errorf("rollback on purpose")

func sqlRows(ctx context.Context, db *sql.DB, q string) ([][]any, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, vals)
	}
	return out, rows.Err()
}

// withWrite fills b.write from b.tx.
func (b *backend) withWrite() *backend {
	b.write = func(ctx context.Context, commit bool, msgs ...*outbox.Message) error {
		return b.tx(ctx, func(write func(...*outbox.Message) error) error {
			if err := write(msgs...); err != nil {
				return err
			}
			if !commit {
				return errRollback
			}
			return nil
		})
	}
	return b
}

// orderMsg is message i of aggregate order-(i % aggs).
func orderMsg(i, aggs int) *outbox.Message {
	return &outbox.Message{
		AggregateType: "order", AggregateID: fmt.Sprintf("order-%d", i%aggs), EventType: "ORDER_PAID",
		Payload: []byte(fmt.Sprintf(`{"order":%d,"amount":%d}`, i, 100+i)),
	}
}

// produce commits n messages in transactions of per messages each and returns their ids.
func produce(t *testing.T, b *backend, n, per int) []string {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, 0, n)
	for i := 0; i < n; i += per {
		var msgs []*outbox.Message
		for j := i; j < min(i+per, n); j++ {
			msgs = append(msgs, orderMsg(j, 50))
		}
		require.NoError(t, b.write(ctx, true, msgs...))
		for _, m := range msgs {
			ids = append(ids, m.MessageID)
		}
	}
	return ids
}

// broker is a JetStream stream of the test's own on the real NATS server, with
// a consumer that counts every delivery by message id.
type broker struct {
	url, prefix string
	js          jetstream.JetStream
	mu          sync.Mutex
	seen        map[string]int
	total       int
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	url := testsvc.NATSURL(t)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	name := strings.ToUpper(testsvc.Name(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The stream captures only ORDER_PAID, the event every test writes, so that a message
	// with another topic finds no stream (TestPoisonMessages).
	require.NoError(t, natspub.EnsureStream(ctx, js, name, []string{name + ".ORDER_PAID"}, 10*time.Minute))
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	b := &broker{url: url, prefix: name + ".", js: js, seen: map[string]int{}}
	cons, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		id := m.Headers().Get(outbox.HeaderMessageID)
		b.mu.Lock()
		b.seen[id]++
		b.total++
		b.mu.Unlock()
	})
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
	return b
}

func (b *broker) publisher(t *testing.T) outbox.Publisher { return publisherAt(t, b.url, b.prefix) }

// publisherAt connects to NATS at url (directly or through a proxy) and returns
// a publisher with the given subject prefix. The connection retries forever.
func publisherAt(t *testing.T, url, prefix string) outbox.Publisher {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	p, err := natspub.New(js, natspub.WithSubjectPrefix(prefix))
	require.NoError(t, err)
	return p
}

// counts returns distinct ids delivered, total deliveries, and the delivery count of id.
func (b *broker) counts() (distinct, total int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.seen), b.total
}

func (b *broker) deliveries(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[id]
}

func (b *broker) waitDistinct(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	testsvc.Eventually(t, timeout, func() bool { d, _ := b.counts(); return d >= n },
		"waiting for %d distinct messages", n)
}

func (b *broker) childConfig(be *backend) childConfig {
	return childConfig{DB: be.dsn, Table: be.table, NATS: b.url, Prefix: b.prefix, Batch: 100,
		Lease: 2 * time.Second, PublishTimeout: time.Second, Poll: 20 * time.Millisecond}
}

// runRelay runs an in-process relay until the test ends.
func runRelay(t *testing.T, st outbox.Store, p outbox.Publisher, opts ...outbox.RelayOption) *outbox.Relay {
	t.Helper()
	// Unordered unless a test says otherwise: these tests count what the
	// relay's claims, leases and fences do; e2e/ordering and the chaos
	// suite run the ordered relay (the default).
	opts = append([]outbox.RelayOption{outbox.WithOrdering(false, outbox.DeadBlocks), outbox.WithPollInterval(20 * time.Millisecond),
		outbox.WithBackoff(50*time.Millisecond, time.Second), outbox.WithPublishTimeout(time.Second),
		outbox.WithLease(2 * time.Second)}, opts...)
	r, err := outbox.NewRelay(st, p, opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return r
}

// dump logs the rows that are not sent, to explain a failure.
func dump(t *testing.T, b *backend) {
	t.Helper()
	rows, err := b.rows(context.Background(), "SELECT message_id, status, retry_count, COALESCE(last_error, '') FROM "+
		b.table+" WHERE status <> 1 ORDER BY id LIMIT 20")
	if err != nil {
		t.Logf("dump: %v", err)
		return
	}
	for _, r := range rows {
		t.Logf("row %v", r)
	}
}

func mustCount(t *testing.T, b *backend, where string) int64 {
	t.Helper()
	n, err := b.count(context.Background(), where)
	require.NoError(t, err)
	return n
}

var _ = pgxpool.New
