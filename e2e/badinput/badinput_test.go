// Package badinput_test feeds the real relay rows that another program wrote
// into the outbox table without going through outbox.Writer: NULLs in
// required columns, payloads that are not JSON or not UTF-8, payloads over
// the relay's limit, event types no route matches. Each table is a hand-made
// one with only the contract's columns, all of them nullable, on PostgreSQL,
// MariaDB and SQLite. Every bad row must go dead on its first attempt with a
// reason that names the problem, and every good row around it must be
// published.
package badinput_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/publisher/router"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// looseTable is a team's hand-made outbox table: the contract's columns and
// nothing else, none of them NOT NULL, the payload a text (or binary) column.
var looseTable = map[string]string{
	"postgres": `CREATE TABLE loose_outbox (
		id bigserial PRIMARY KEY, message_id varchar(64) UNIQUE, aggregate_type varchar(64), aggregate_id varchar(64),
		event_type varchar(64), payload text, status smallint DEFAULT 0, retry_count int DEFAULT 0,
		next_retry_at timestamptz, created_at timestamptz DEFAULT now(), updated_at timestamptz DEFAULT now())`,
	// LONGBLOB: a binary payload column is the way non-UTF-8 bytes reach the
	// relay on MariaDB; a utf8mb4 LONGTEXT refuses them at insert in strict
	// mode (TestMySQLTextColumnsRefuseNonUTF8).
	"mysql": `CREATE TABLE loose_outbox (
		id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(64) UNIQUE, aggregate_type VARCHAR(64),
		aggregate_id VARCHAR(64), event_type VARCHAR(64), payload LONGBLOB, status TINYINT DEFAULT 0,
		retry_count INT DEFAULT 0, next_retry_at DATETIME NULL, created_at DATETIME DEFAULT CURRENT_TIMESTAMP,
		updated_at DATETIME DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
		INDEX (status, next_retry_at), INDEX (aggregate_type, aggregate_id)) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4`,
	"sqlite": `CREATE TABLE loose_outbox (
		id INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT UNIQUE, aggregate_type TEXT, aggregate_id TEXT,
		event_type TEXT, payload TEXT, status INTEGER DEFAULT 0, retry_count INTEGER DEFAULT 0, next_retry_at TEXT,
		created_at TEXT DEFAULT CURRENT_TIMESTAMP, updated_at TEXT DEFAULT CURRENT_TIMESTAMP)`,
}

// backend is one database with a loose_outbox table and a store on it.
type backend struct {
	name  string
	store outbox.Store
	write func(ctx context.Context, msgs ...*outbox.Message) error
	// insert writes one row by hand and returns its id.
	insert func(ctx context.Context, messageID, aggType, aggID, eventType, payload any) (int64, error)
	// row returns a row's status and retry_count.
	row func(ctx context.Context, id int64) (status, retries int, err error)
}

func postgresBackend(t *testing.T) *backend {
	pool, _, _ := testsvc.PostgresSchema(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, looseTable["postgres"])
	require.NoError(t, err)
	st, err := pgstore.New(pool, pgstore.WithTable("loose_outbox"))
	require.NoError(t, err)
	w := outbox.NewWriter[pgx.Tx](st)
	return &backend{
		name: "postgres", store: st,
		write: func(ctx context.Context, msgs ...*outbox.Message) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
		},
		insert: func(ctx context.Context, id, typ, agg, evt, payload any) (n int64, err error) {
			err = pool.QueryRow(ctx, `INSERT INTO loose_outbox (message_id, aggregate_type, aggregate_id, event_type, payload)
				VALUES ($1, $2, $3, $4, $5) RETURNING id`, id, typ, agg, evt, payload).Scan(&n)
			return n, err
		},
		row: func(ctx context.Context, id int64) (s, r int, err error) {
			err = pool.QueryRow(ctx, `SELECT status, retry_count FROM loose_outbox WHERE id = $1`, id).Scan(&s, &r)
			return s, r, err
		},
	}
}

func mysqlBackend(t *testing.T) *backend {
	db, _ := testsvc.MySQLDatabase(t)
	_, err := db.Exec(looseTable["mysql"])
	require.NoError(t, err)
	st, err := mysqlstore.New(db, mysqlstore.WithTable("loose_outbox"))
	require.NoError(t, err)
	return sqlBackend("mysql", db, st, outbox.NewWriter[*sql.Tx](st))
}

func sqliteBackend(t *testing.T) *backend {
	db, err := sqlitestore.Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.Exec(looseTable["sqlite"])
	require.NoError(t, err)
	st, err := sqlitestore.New(db, sqlitestore.WithTable("loose_outbox"))
	require.NoError(t, err)
	return sqlBackend("sqlite", db, st, outbox.NewWriter[*sql.Tx](st))
}

func sqlBackend(name string, db *sql.DB, st outbox.Store, w *outbox.Writer[*sql.Tx]) *backend {
	return &backend{
		name: name, store: st,
		write: func(ctx context.Context, msgs ...*outbox.Message) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := w.Write(ctx, tx, msgs...); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		insert: func(ctx context.Context, id, typ, agg, evt, payload any) (int64, error) {
			res, err := db.ExecContext(ctx, `INSERT INTO loose_outbox (message_id, aggregate_type, aggregate_id, event_type, payload)
				VALUES (?, ?, ?, ?, ?)`, id, typ, agg, evt, payload)
			if err != nil {
				return 0, err
			}
			return res.LastInsertId()
		},
		row: func(ctx context.Context, id int64) (s, r int, err error) {
			err = db.QueryRowContext(ctx, `SELECT status, retry_count FROM loose_outbox WHERE id = ?`, id).Scan(&s, &r)
			return s, r, err
		},
	}
}

var backends = []struct {
	name string
	new  func(*testing.T) *backend
}{{"postgres", postgresBackend}, {"mysql", mysqlBackend}, {"sqlite", sqliteBackend}}

// deadReasons is a relay hook that keeps the reason of every dead message, by row id.
type deadReasons struct {
	mu     sync.Mutex
	reason map[int64]string
}

func (d *deadReasons) OnMessage(ev outbox.MessageEvent) {
	if ev.Result != outbox.ResultDead {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reason[ev.Message.RowID] = ev.Err.Error()
}

func (d *deadReasons) get(id int64) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.reason[id]
	return r, ok
}

// badRow is a row written by hand and what the relay must say about it.
type badRow struct {
	name                                      string
	messageID, aggType, aggID, event, payload any
	reason                                    string            // a substring of the dead reason
	refusedBy                                 map[string]string // databases that refuse the row at insert, and their error
}

func badRows() []badRow {
	huge := `{"blob":"` + strings.Repeat("x", outbox.DefaultMaxPayloadSize) + `"}`
	return []badRow{
		{name: "NullMessageID", aggType: "order", aggID: "1", event: "ORDER_PAID", payload: `{}`, reason: "message_id is NULL"},
		{name: "NullAggregateType", messageID: "bad-2", aggID: "1", event: "ORDER_PAID", payload: `{}`, reason: "aggregate_type is NULL"},
		{name: "NullAggregateID", messageID: "bad-3", aggType: "order", event: "ORDER_PAID", payload: `{}`, reason: "aggregate_id is NULL"},
		{name: "NullEventType", messageID: "bad-4", aggType: "order", aggID: "1", payload: `{}`, reason: "event_type is NULL"},
		{name: "NullPayload", messageID: "bad-5", aggType: "order", aggID: "1", event: "ORDER_PAID", reason: "payload is NULL"},
		{name: "InvalidJSON", messageID: "bad-6", aggType: "order", aggID: "1", event: "ORDER_PAID", payload: `{"amount":`,
			reason: "payload is not valid JSON"},
		{name: "NonUTF8Payload", messageID: "bad-7", aggType: "order", aggID: "1", event: "ORDER_PAID",
			payload: "\"caf\xe9\"", reason: "not valid UTF-8",
			refusedBy: map[string]string{"postgres": "invalid byte sequence for encoding \"UTF8\""}},
		{name: "NonUTF8AggregateID", messageID: "bad-8", aggType: "order", aggID: "caf\xe9", event: "ORDER_PAID",
			payload: `{}`, reason: "not valid UTF-8", refusedBy: map[string]string{
				"postgres": "invalid byte sequence for encoding \"UTF8\"", "mysql": "Incorrect string value"}},
		{name: "OverTheRelaysLimit", messageID: "bad-9", aggType: "order", aggID: "1", event: "ORDER_PAID", payload: huge,
			reason: "over the relay's limit"},
		{name: "UnknownRoute", messageID: "bad-10", aggType: "invoice", aggID: "1", event: "INVOICE_SENT", payload: `{}`,
			reason: `router: no route for event type "INVOICE_SENT" (aggregate "invoice")`},
	}
}

// TestRowsWrittenByAnotherProgram runs the relay, through a router, over a
// hand-made table in which good rows written by outbox.Writer surround bad
// rows written by raw SQL. Every bad row that the database accepted goes dead
// on its first attempt with a reason naming the problem; every good row is
// published once.
func TestRowsWrittenByAnotherProgram(t *testing.T) {
	t.Parallel()
	for _, db := range backends {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			be := db.new(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			var good []string
			writeGood := func(n int) {
				for range n {
					m := &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprint(len(good) % 3),
						EventType: "ORDER_PAID", Payload: fmt.Appendf(nil, `{"n":%d}`, len(good))}
					require.NoError(t, be.write(ctx, m))
					good = append(good, m.MessageID)
				}
			}
			ids := map[string]int64{}
			var want []badRow
			for _, r := range badRows() {
				writeGood(2)
				id, err := be.insert(ctx, r.messageID, r.aggType, r.aggID, r.event, r.payload)
				if refusal, ok := r.refusedBy[db.name]; ok {
					require.ErrorContains(t, err, refusal, "%s: the database itself refuses the row", r.name)
					continue
				}
				require.NoError(t, err, r.name)
				ids[r.name] = id
				want = append(want, r)
			}
			writeGood(2)

			mem := outboxtest.NewPublisher()
			rt, err := router.New([]router.Route{{EventType: "ORDER_*", Publisher: "mem"}},
				map[string]outbox.Publisher{"mem": mem})
			require.NoError(t, err)
			hook := &deadReasons{reason: map[int64]string{}}
			relay, err := outbox.NewRelay(be.store, rt, outbox.WithHooks(hook), outbox.WithBatchSize(7),
				outbox.WithOrdering(false, outbox.DeadBlocks), // every good row goes out, whatever its aggregate's dead rows
				outbox.WithBackoff(time.Millisecond, 10*time.Millisecond))
			require.NoError(t, err)
			_, err = outboxtest.FlushAndWait(ctx, relay, be.store)
			require.NoError(t, err)

			var sent []string
			for _, m := range mem.Messages() {
				sent = append(sent, m.MessageID)
			}
			require.ElementsMatch(t, good, sent, "every good row published once, no bad one")
			for _, r := range want {
				reason, ok := hook.get(ids[r.name])
				require.True(t, ok, "%s: reported dead", r.name)
				require.Contains(t, reason, r.reason, r.name)
				status, retries, err := be.row(ctx, ids[r.name])
				require.NoError(t, err)
				require.Equal(t, int(outbox.StatusDead), status, r.name)
				require.Equal(t, 1, retries, "%s: dead on its first attempt", r.name)
			}
			st, err := be.store.Stats(ctx)
			require.NoError(t, err)
			require.Zero(t, st.Pending)
			require.EqualValues(t, len(want), st.Dead)
		})
	}
}

// TestMySQLTextColumnsRefuseNonUTF8 shows why the MariaDB case above uses a
// binary payload column: over the driver's utf8mb4 connection, in strict mode
// (the default), the server itself refuses bytes that are not UTF-8 in any
// text column, a utf8mb4 LONGTEXT (MariaDB's JSON type is one) as well as a
// latin1 one. Only a binary column hands such bytes to the relay.
func TestMySQLTextColumnsRefuseNonUTF8(t *testing.T) {
	t.Parallel()
	db, _ := testsvc.MySQLDatabase(t)
	ctx := context.Background()
	_, err := db.ExecContext(ctx, `CREATE TABLE outbox_message (
		id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(64) NOT NULL UNIQUE,
		aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL,
		payload LONGTEXT NOT NULL, latin LONGTEXT CHARACTER SET latin1 NULL, status TINYINT NOT NULL DEFAULT 0,
		retry_count INT NOT NULL DEFAULT 0, next_retry_at DATETIME NULL,
		created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP, updated_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
	) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4`)
	require.NoError(t, err)
	for _, v := range []any{"\"caf\xe9\"", []byte("\"caf\xe9\"")} {
		_, err = db.ExecContext(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ('m1', 'order', '1', 'ORDER_PAID', ?)`, v)
		require.ErrorContains(t, err, "Incorrect string value", "utf8mb4 LONGTEXT, %T", v)
		_, err = db.ExecContext(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, latin)
			VALUES ('m2', 'order', '1', 'ORDER_PAID', '{}', ?)`, v)
		require.ErrorContains(t, err, "Incorrect string value", "latin1 LONGTEXT, %T", v)
	}
}
