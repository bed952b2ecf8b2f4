package pgstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/storetest"
)

// contractDDL creates a table with only the contract columns, nullable where
// the contract allows it, as a team's own table would be.
const contractDDL = `CREATE TABLE %[1]s (
	id             bigserial PRIMARY KEY,
	message_id     varchar(64) UNIQUE,
	aggregate_type varchar(64),
	aggregate_id   varchar(64),
	event_type     varchar(64),
	payload        %[2]s,
	status         smallint NOT NULL DEFAULT 0,
	retry_count    int NOT NULL DEFAULT 0,
	next_retry_at  %[3]s NULL,
	created_at     %[3]s NOT NULL DEFAULT now(),
	updated_at     %[3]s NOT NULL DEFAULT now()
);
CREATE INDEX ON %[1]s (status, next_retry_at);
CREATE INDEX ON %[1]s (aggregate_type, aggregate_id);`

func TestStore(t *testing.T) {
	t.Parallel()
	h := harness()
	h.Runs = true // ordered claims return runs (runs.go)
	storetest.Run(t, h)
}

// TestHostileRowsEachClaim runs storetest's hostile rows with the ways of
// claiming that TestStore does not use: batch leases (on a migrated table
// only, since they need its side table) and held claims.
func TestHostileRowsEachClaim(t *testing.T) {
	t.Parallel()
	for _, tc := range unorderedClaims[1:] {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := harness(tc.opts...)
			if tc.name == "BatchLeases" {
				h.ContractOnly = nil
			}
			storetest.RunHostileRows(t, h)
		})
	}
}

// harness is storetest's harness for Stores with opts. Stores on a table
// with only the contract's columns write through the database/sql path.
func harness(opts ...pgstore.Option) storetest.Harness {
	return storetest.Harness{
		Dialect: storetest.Postgres,
		New: func(t *testing.T) *storetest.Fixture {
			pool, _, _ := testsvc.PostgresSchema(t)
			s := newStore(t, pool, opts...)
			w := outbox.NewWriter(s)
			return &storetest.Fixture{
				Store: s,
				Write: func(ctx context.Context, msgs ...*outbox.Message) error {
					return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
				},
				DB:    sqlDB(t, pool),
				Table: pgstore.DefaultTable,
			}
		},
		ContractOnly: func(t *testing.T) *storetest.Fixture {
			pool, _, _ := testsvc.PostgresSchema(t)
			exec(t, pool, fmt.Sprintf(contractDDL, "legacy_outbox", "jsonb", "timestamptz"))
			s, err := pgstore.New(pool, append([]pgstore.Option{pgstore.WithTable("legacy_outbox")}, opts...)...)
			require.NoError(t, err)
			db := sqlDB(t, pool)
			w := outbox.NewWriter(s.SQLTx()) // the database/sql path
			return &storetest.Fixture{
				Store: s,
				Write: func(ctx context.Context, msgs ...*outbox.Message) error {
					return sqlTx(ctx, db, func(tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) })
				},
				DB:    db,
				Table: "legacy_outbox",
			}
		},
	}
}

func newStore(t testing.TB, pool *pgxpool.Pool, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(pool, opts...)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

func sqlDB(t testing.TB, pool *pgxpool.Pool) *sql.DB {
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	return db
}

func sqlTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func exec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n), sql)
	return n
}

func msg(aggID string) *outbox.Message {
	return &outbox.Message{AggregateType: "order", AggregateID: aggID, EventType: "ORDER_PAID", Payload: []byte(`{"ok":true}`)}
}

func TestNewRejectsBadTableNames(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	for _, name := range []string{
		"",
		"outbox; DROP TABLE users",
		`outbox"; DROP TABLE users; --`,
		"outbox message",
		"Outbox",
		"1outbox",
		"a.b.c",
		".outbox",
		"outbox.",
		"public.",
		"out-box",
		"outbox\x00",
		"outbox'",
		"ünïcode",
		strings.Repeat("a", 64),
	} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			_, err := pgstore.New(pool, pgstore.WithTable(name))
			require.Error(t, err)
			require.Contains(t, err.Error(), "WithTable")
		})
	}
	for _, name := range []string{"outbox_message", "_x", "public.outbox", strings.Repeat("a", 63), "s1.t_2"} {
		s, err := pgstore.New(pool, pgstore.WithTable(name))
		require.NoError(t, err, name)
		require.Equal(t, name, s.Table())
	}
}

func TestSchemaQualifiedAndLongNames(t *testing.T) {
	t.Parallel()
	pool, schema, _ := testsvc.PostgresSchema(t)
	long := strings.Repeat("x", 60)
	for _, table := range []string{schema + ".events_out", long, long[:59] + "y"} {
		s := newStore(t, pool, pgstore.WithTable(table))
		require.NoError(t, s.Migrate(t.Context()), "second migrate")
		w := outbox.NewWriter(s)
		require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, msg("1")) }))
		c, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, c.Messages, 1, table)
	}
	// The two long names share a 59-byte prefix: each must still get its own indexes.
	for _, table := range []string{long, long[:59] + "y"} {
		n := count(t, pool, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = $2`, schema, table)
		require.Equal(t, 6, n, "indexes of %s: pkey, unique message_id and four of ours", table)
	}
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	pool, schema, _ := testsvc.PostgresSchema(t)
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		// Separate pools, as separate processes would have.
		cfg := pool.Config().Copy()
		cfg.MaxConns = 1
		p, err := pgxpool.NewWithConfig(t.Context(), cfg)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		s, err := pgstore.New(p)
		require.NoError(t, err)
		wg.Go(func() { errs[i] = s.Migrate(t.Context()) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "migration %d", i)
	}
	require.Equal(t, 19, count(t, pool, `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'outbox_message'`, schema))
	require.Equal(t, 6, count(t, pool, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = 'outbox_message'`, schema))
}

func TestMigrateUpToDateTakesNoTableLock(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	newStore(t, pool)

	// Another transaction holds a lock that both ALTER TABLE and CREATE INDEX wait for.
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(t.Context(), "LOCK TABLE outbox_message IN SHARE ROW EXCLUSIVE MODE")
	require.NoError(t, err)

	s, err := pgstore.New(pool)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	require.NoError(t, s.Migrate(ctx), "an up-to-date table needs no DDL")
}

func TestMigrateUpgradesContractTable(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	exec(t, pool, fmt.Sprintf(contractDDL, "outbox_message", "jsonb", "timestamptz"))
	exec(t, pool, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('old-1', 'order', '1', 'E', '{"old":true}')`)

	s := newStore(t, pool)
	require.Equal(t, 19, count(t, pool, `SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'outbox_message'`))
	w := outbox.NewWriter(s)
	m := msg("2")
	m.Headers = map[string]string{"k": "v"}
	m.Topic = "t"
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, m) }))

	c, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, c.Messages, 2)
	require.Equal(t, "old-1", c.Messages[0].MessageID, "the old row survived")
	require.Equal(t, map[string]string{"k": "v"}, c.Messages[1].Headers, "the new columns are used after Migrate")
	require.Equal(t, "t", c.Messages[1].Topic)
}

func TestMissingOrIncompleteTable(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	s, err := pgstore.New(pool, pgstore.WithTable("nowhere"))
	require.NoError(t, err)
	_, err = s.Claim(t.Context(), outbox.ClaimParams{Limit: 1, Lease: time.Minute})
	require.ErrorContains(t, err, "does not exist")
	require.ErrorContains(t, err, "Migrate")

	exec(t, pool, `CREATE TABLE half (id bigserial PRIMARY KEY, message_id text, payload jsonb)`)
	s, err = pgstore.New(pool, pgstore.WithTable("half"))
	require.NoError(t, err)
	_, err = s.Stats(t.Context())
	require.ErrorContains(t, err, "missing contract columns: aggregate_id, aggregate_type, created_at, event_type, next_retry_at, retry_count, status, updated_at")

	exec(t, pool, fmt.Sprintf(contractDDL, "binary_payload", "bytea", "timestamptz"))
	s, err = pgstore.New(pool, pgstore.WithTable("binary_payload"))
	require.NoError(t, err)
	_, err = s.Stats(t.Context())
	require.ErrorContains(t, err, "column payload is bytea")
}

func TestPgxTxCommitAndRollback(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	s := newStore(t, pool)
	exec(t, pool, `CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL)`)
	w := outbox.NewWriter(s)
	ctx := t.Context()

	write := func(id string) (pgx.Tx, error) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1, 'PAID')`, id); err != nil {
			return tx, err
		}
		return tx, w.Write(ctx, tx, msg(id))
	}

	tx, err := write("rolled-back")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM outbox_message`))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM orders`))

	tx, err = write("committed")
	require.NoError(t, err)
	c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, c.Messages, "uncommitted rows are invisible to relays")
	require.NoError(t, tx.Commit(ctx))
	c, err = s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, c.Messages, 1)
	require.Equal(t, "committed", c.Messages[0].AggregateID)
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM orders`))
}

func TestSQLTxWriter(t *testing.T) {
	t.Parallel()
	pool, _, dsn := testsvc.PostgresSchema(t)
	s := newStore(t, pool)
	db, err := sql.Open("pgx", dsn) // a database/sql user's own handle
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	w := outbox.NewWriter(s.SQLTx())
	ctx := t.Context()

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, w.Write(ctx, tx, msg("a"), msg("b")))
	require.NoError(t, tx.Rollback())
	require.Zero(t, count(t, pool, `SELECT count(*) FROM outbox_message`))

	m := msg("c")
	m.Headers = map[string]string{"x": "y"}
	m.PartitionKey = "pk"
	require.NoError(t, sqlTx(ctx, db, func(tx *sql.Tx) error { return w.Write(ctx, tx, m, msg("d")) }))
	c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, c.Messages, 2)
	require.Equal(t, m.MessageID, c.Messages[0].MessageID)
	require.Equal(t, map[string]string{"x": "y"}, c.Messages[0].Headers)
	require.Equal(t, "pk", c.Messages[0].PartitionKey)
	require.Equal(t, "d", c.Messages[1].AggregateID)

	err = sqlTx(ctx, db, func(tx *sql.Tx) error { return w.Write(ctx, tx, m) })
	require.ErrorIs(t, err, pgstore.ErrDuplicate)
}

func TestDuplicateMessageID(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	s := newStore(t, pool)
	w := outbox.NewWriter(s)
	m := msg("1")
	m.MessageID = "same"
	write := func() error {
		return pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, m) })
	}
	require.NoError(t, write())
	err := write()
	require.ErrorIs(t, err, pgstore.ErrDuplicate)
	var pgErr interface{ SQLState() string }
	require.True(t, errors.As(err, &pgErr), "the driver error is kept: %v", err)
	require.Equal(t, "23505", pgErr.SQLState())
}

// statementCounter counts the statements a pool sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestOneStatementPerCall(t *testing.T) {
	t.Parallel()
	base, _, _ := testsvc.PostgresSchema(t)
	counter := &statementCounter{}
	cfg := base.Config().Copy()
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := newStore(t, pool)
	w := outbox.NewWriter(s)
	ctx := t.Context()
	_, err = s.Stats(ctx) // learns the table's columns
	require.NoError(t, err)
	// The first claim makes sure no relay batch-leases the table; once.
	_, err = s.Claim(ctx, outbox.ClaimParams{Limit: 1, Lease: time.Minute})
	require.NoError(t, err)

	msgs := make([]*outbox.Message, 500)
	for i := range msgs {
		msgs[i] = msg(fmt.Sprint(i))
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	before := counter.n.Load()
	require.NoError(t, w.Write(ctx, tx, msgs...))
	require.EqualValues(t, 1, counter.n.Load()-before, "statements for a write of 500 messages")
	require.NoError(t, tx.Commit(ctx))

	var c *outbox.Claim
	for _, step := range []struct {
		name string
		run  func()
	}{
		{"Claim", func() {
			c, err = s.Claim(ctx, outbox.ClaimParams{Limit: 300, Lease: time.Minute})
			require.NoError(t, err)
			require.Len(t, c.Messages, 300)
		}},
		{"Ack", func() {
			n, err := s.Ack(ctx, outbox.AckParams{Messages: c.Messages[:100]})
			require.NoError(t, err)
			require.Equal(t, 100, n)
		}},
		{"AckDelete", func() {
			n, err := s.Ack(ctx, outbox.AckParams{Messages: c.Messages[100:150], Delete: true})
			require.NoError(t, err)
			require.Equal(t, 50, n)
		}},
		{"Reschedule", func() {
			var rs []outbox.Retry
			for _, m := range c.Messages[150:250] {
				rs = append(rs, outbox.Retry{Message: m, At: time.Now(), Err: "x"})
			}
			require.NoError(t, s.Reschedule(ctx, outbox.RescheduleParams{Retries: rs}))
		}},
		{"Kill", func() {
			var ds []outbox.Dead
			for _, m := range c.Messages[250:] {
				ds = append(ds, outbox.Dead{Message: m, Reason: "x"})
			}
			require.NoError(t, s.Kill(ctx, outbox.KillParams{Dead: ds}))
		}},
		{"Stats", func() {
			st, err := s.Stats(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 50, st.Dead)
		}},
	} {
		before := counter.n.Load()
		step.run()
		require.EqualValues(t, 1, counter.n.Load()-before, "statements for %s", step.name)
	}
}

func TestErrorTextIsMadeStorable(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	s := newStore(t, pool)
	w := outbox.NewWriter(s)
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return w.Write(t.Context(), tx, msg("1"), msg("2"))
	}))
	c, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: 2, Lease: time.Minute})
	require.NoError(t, err)

	for i, tc := range []struct {
		name string
		kill bool // through Kill, else Reschedule
		in   string
		want func(t *testing.T, got string)
	}{
		{"NULAndBadUTF8", false, "broker\x00 said \xff\xfe no ✓", func(t *testing.T, got string) {
			require.Equal(t, "broker said \uFFFD no ✓", got)
		}},
		{"Huge", true, strings.Repeat("é", 5000), func(t *testing.T, got string) {
			require.LessOrEqual(t, len(got), 4096)
			require.Greater(t, len(got), 4000)
			require.Equal(t, strings.Repeat("é", len(got)/2), got, "cut on a rune boundary")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := c.Messages[i]
			if tc.kill {
				require.NoError(t, s.Kill(t.Context(), outbox.KillParams{Dead: []outbox.Dead{{Message: m, Reason: tc.in}}}))
			} else {
				require.NoError(t, s.Reschedule(t.Context(), outbox.RescheduleParams{
					Retries: []outbox.Retry{{Message: m, At: time.Now().Add(time.Hour), Err: tc.in}}}))
			}
			var got string
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT last_error FROM outbox_message WHERE id = $1`, m.RowID).Scan(&got))
			tc.want(t, got)
		})
	}
}

// TestLegacyColumnTypes runs a contract table whose payload is text and whose
// timestamps have no time zone, on connections whose TimeZone is not UTC.
func TestLegacyColumnTypes(t *testing.T) {
	t.Parallel()
	base, _, _ := testsvc.PostgresSchema(t)
	cfg := base.Config().Copy()
	cfg.ConnConfig.RuntimeParams["timezone"] = "Asia/Kathmandu" // UTC+05:45
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	exec(t, pool, fmt.Sprintf(contractDDL, "legacy", "text", "timestamp"))
	exec(t, pool, `INSERT INTO legacy (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('bad', 'order', '1', 'E', '{nope')`)

	s, err := pgstore.New(pool, pgstore.WithTable("legacy"))
	require.NoError(t, err)
	w := outbox.NewWriter(s)
	payload := `{"b": 1,   "a": [1, 2]}`
	m := msg("2")
	m.Payload = json.RawMessage(payload)
	before := time.Now()
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, m) }))

	c, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, c.Malformed, 1)
	require.ErrorContains(t, c.Malformed[0].Err, "not valid JSON")
	require.Len(t, c.Messages, 1)
	got := c.Messages[0]
	require.Equal(t, payload, string(got.Payload), "a text payload comes back byte for byte")
	require.WithinDuration(t, before, got.CreatedAt, 5*time.Second, "created_at read in the session's time zone")

	at := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	require.NoError(t, s.Reschedule(t.Context(), outbox.RescheduleParams{Retries: []outbox.Retry{{Message: got, At: at}}}))
	c, err = s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, c.Messages, 1, "a retry a minute ago is due, whatever the session's time zone")

	at = time.Now().Add(30 * time.Minute)
	require.NoError(t, s.Reschedule(t.Context(), outbox.RescheduleParams{Retries: []outbox.Retry{{Message: c.Messages[0], At: at}}}))
	c, err = s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Hour})
	require.NoError(t, err)
	require.Empty(t, c.Messages, "a retry in 30 minutes is not due")

	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Less(t, st.OldestPending, time.Minute)
}

func TestNotify(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	s := newStore(t, pool, pgstore.WithNotify(true))
	w := outbox.NewWriter(s)

	ctx, cancel := context.WithCancel(t.Context())
	l := startListen(ctx, s)
	receive := func(what string) { t.Helper(); l.receive(t, what) }
	receive("when Listen started")
	for i := range 2 {
		require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			return w.Write(t.Context(), tx, msg(fmt.Sprint(i)), msg("other"))
		}))
		receive(fmt.Sprintf("after commit %d", i))
	}

	// Another Store on the same table (a service writing, while this one
	// relays) notifies the same channel.
	writer, err := pgstore.New(pool, pgstore.WithNotify(true))
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return outbox.NewWriter(writer).Write(t.Context(), tx, msg("late"))
	}))
	receive("after another store's commit")

	cancel()
	select {
	case err := <-l.done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return after cancel")
	}
}

// listening is a Store.Listen running in the background: its wake-ups, and
// its result once it returns.
type listening struct {
	wakes chan struct{}
	done  chan error
}

func startListen(ctx context.Context, s *pgstore.Store) *listening {
	l := &listening{wakes: make(chan struct{}, 16), done: make(chan error, 1)}
	go func() { l.done <- s.Listen(ctx, func() { l.wakes <- struct{}{} }) }()
	return l
}

// receive waits for a wake-up, failing t if Listen returns or none comes.
func (l *listening) receive(t *testing.T, what string) {
	t.Helper()
	select {
	case <-l.wakes:
	case err := <-l.done:
		t.Fatalf("Listen returned early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("no wake-up %s", what)
	}
}

func TestListenWithoutNotifyWaitsForContext(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	s := newStore(t, pool)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	woken := false
	require.NoError(t, s.Listen(ctx, func() { woken = true }))
	require.False(t, woken)
	require.Error(t, ctx.Err(), "Listen returned before its context ended")
}

func TestPing(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	s, err := pgstore.New(pool)
	require.NoError(t, err)
	require.NoError(t, s.Ping(t.Context()))

	cfg := pool.Config().Copy()
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", 1 // nothing listens there
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	cfg.ConnConfig.Fallbacks = nil
	dead, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(dead.Close)
	s, err = pgstore.New(dead)
	require.NoError(t, err)
	require.Error(t, s.Ping(t.Context()))
}

// TestTextCreatedAt: on a team's own table whose created_at is text, one row
// whose text is not a time made every claim fail (the claim cast it to
// timestamptz). The row is delivered with no CreatedAt, and its neighbours
// with theirs.
func TestTextCreatedAt(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	exec(t, pool, fmt.Sprintf(contractDDL, "text_times", "jsonb", "timestamptz"))
	exec(t, pool, "ALTER TABLE text_times ALTER COLUMN created_at DROP DEFAULT, ALTER COLUMN created_at TYPE text")
	for _, created := range []string{"2026-01-02 03:04:05.678+00", "long ago", "2026-01-02T03:04:05Z"} {
		exec(t, pool, `INSERT INTO text_times (message_id, aggregate_type, aggregate_id, event_type, payload, created_at)
			VALUES (gen_random_uuid()::text, 'order', '1', 'E', '{}', $1)`, created)
	}
	s, err := pgstore.New(pool, pgstore.WithTable("text_times"))
	require.NoError(t, err)
	c, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, c.Malformed)
	require.Len(t, c.Messages, 3)
	want := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.Equal(t, want.Add(678*time.Millisecond), c.Messages[0].CreatedAt.UTC())
	require.True(t, c.Messages[1].CreatedAt.IsZero())
	require.Equal(t, want, c.Messages[2].CreatedAt.UTC())
}
