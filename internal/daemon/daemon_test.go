package daemon

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/pgstore"
)

func TestSchemeRegistriesMatchConfig(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, config.DBSchemes, slices.Collect(maps.Keys(dbOpeners)),
		"every database scheme config accepts has an opener, and no other")
	require.ElementsMatch(t, config.BrokerSchemes, slices.Collect(maps.Keys(brokerOpeners)),
		"every broker scheme config accepts has an opener, and no other")
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	c := config.Default()
	c.Table = "x; drop table y"
	d, err := New(c, nil)
	require.Nil(t, d)
	require.ErrorContains(t, err, `table: "x; drop table y" is not a valid table name`)
	require.ErrorContains(t, err, "db: required")
	require.ErrorContains(t, err, "broker: required")

	_, err = New(nil, nil)
	require.Error(t, err)
}

// mysqlURL turns a go-sql-driver DSN into the daemon's mysql:// URL.
func mysqlURL(t *testing.T, dsn string) string {
	t.Helper()
	c, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	u := url.URL{Scheme: "mysql", Host: c.Addr, Path: "/" + c.DBName}
	if c.Passwd != "" {
		u.User = url.UserPassword(c.User, c.Passwd)
	} else {
		u.User = url.User(c.User)
	}
	return u.String()
}

func TestRunMySQLToNATS(t *testing.T) {
	t.Parallel()
	sqlDB, dsn := testsvc.MySQLDatabase(t)
	stream := newNATSStream(t)
	ctx := context.Background()
	dbURL := config.NewSecret(mysqlURL(t, dsn))

	db, err := OpenDB(ctx, dbURL, DBParams{})
	require.NoError(t, err)
	require.Equal(t, "mysql", db.Scheme)
	require.NoError(t, db.Store.Migrate(ctx))
	db.Close()

	writer, err := mysqlstore.New(sqlDB)
	require.NoError(t, err)
	tx, err := sqlDB.BeginTx(ctx, nil)
	require.NoError(t, err)
	msgs := []*outbox.Message{
		{AggregateType: "order", AggregateID: "1", EventType: "ORDER_PAID", Payload: []byte(`{"n":1}`)},
		{AggregateType: "order", AggregateID: "2", EventType: "ORDER_PAID", Payload: []byte(`{"n":2}`)},
	}
	require.NoError(t, outbox.NewWriter[*sql.Tx](writer).Write(ctx, tx, msgs...))
	require.NoError(t, tx.Commit())

	d, err := New(baseConfig(dbURL, stream.broker("events")), nil)
	require.NoError(t, err)
	stop := running(t, d)
	testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == 2 }, "both messages published")
	testsvc.Eventually(t, 10*time.Second, func() bool {
		st, err := writer.Stats(ctx)
		return err == nil && st.Pending == 0
	}, "both rows acknowledged")
	require.NoError(t, stop())
	require.ElementsMatch(t, []string{msgs[0].MessageID, msgs[1].MessageID}, stream.messageIDs(t))
}

func TestSQLitePath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"sqlite:///var/lib/outbox.db": "/var/lib/outbox.db",
		"sqlite://outbox.db":          "outbox.db",
		"sqlite://data/outbox.db":     "data/outbox.db",
	} {
		require.Equal(t, want, sqlitePath(in))
	}
}

func TestScrub(t *testing.T) {
	t.Parallel()
	base := errors.New("dial postgres://u:hunter2@h/db failed; password hunter2 and p@ss%2Cword p@ss,word")
	err := scrub(fmt.Errorf("open: %w", base),
		config.NewSecret("postgres://u:hunter2@h/db"), config.NewSecret("nats://x:p%40ss%2Cword@n:4222"))
	require.EqualError(t, err, "open: dial postgres://u:REDACTED@h/db failed; password REDACTED and p@ss%2Cword REDACTED")
	require.ErrorIs(t, err, base, "still wraps the original")
	require.Nil(t, scrub(nil))
	plain := errors.New("nothing secret")
	require.Same(t, plain, scrub(plain, config.NewSecret("postgres://u:hunter2@h/db")))
}

func TestOpenDBErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pgOnly := "open database: notify, notify_trigger, batch_lease, async_commit and held_claims apply to postgres:// only, not "
	for _, tc := range []struct {
		name, dsn string
		p         DBParams
		want      string
	}{
		{"UnknownScheme", "oracle://scott:tiger@db/orcl", DBParams{}, `open database: unknown scheme "oracle"; want mysql://, postgres://, postgresql://, sqlite://`},
		{"UnreachablePostgres", "postgres://postgres:hunter22@127.0.0.1:1/test?connect_timeout=2", DBParams{}, "open postgres database:"},
		{"SQLiteNoDirectory", "sqlite:///nonexistent/dir/outbox.db", DBParams{}, "open sqlite database:"},
		{"UnreachableMySQL", "mysql://root:hunter22@127.0.0.1:1/test?timeout=2s", DBParams{}, "open mysql database:"},
		// config.Validate refuses these first; OpenDB does not ignore them either.
		{"NotifyTriggerSQLite", "sqlite://x.db", DBParams{NotifyTrigger: true}, pgOnly + "sqlite://"},
		{"BatchLeaseMySQL", "mysql://root:hunter22@127.0.0.1:1/test", DBParams{BatchLease: true}, pgOnly + "mysql://"},
		{"AsyncCommitSQLite", "sqlite://x.db", DBParams{AsyncCommit: true}, pgOnly + "sqlite://"},
		{"HeldClaimsMySQL", "mysql://root:hunter22@127.0.0.1:1/test", DBParams{HeldClaims: true}, pgOnly + "mysql://"},
		{"HeldClaimsWithBatchLease", "postgres://postgres:hunter22@127.0.0.1:1/test", DBParams{HeldClaims: true, BatchLease: true},
			"open database: held_claims and batch_lease are two ways of claiming; choose one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, err := OpenDB(ctx, config.NewSecret(tc.dsn), tc.p)
			require.Nil(t, db)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "hunter22")
			require.NotContains(t, err.Error(), "tiger")
		})
	}
}

func TestRunSQLiteToNATS(t *testing.T) {
	t.Parallel()
	dsn, db, store := sqliteDB(t)
	stream := newNATSStream(t)
	msgs := writeSQLite(t, db, store, "ORDER_PAID", 25)

	cfg := baseConfig(dsn, stream.broker("events"))
	cfg.Relays = 3
	cfg.BatchSize = 4
	cfg.MaxInFlight = 2
	cfg.HTTP = "127.0.0.1:0"
	var logs syncBuffer
	logger, err := NewLogger(&logs, "debug", "json")
	require.NoError(t, err)
	hook := &sentCounter{}
	d, err := New(cfg, logger, WithRelayHooks(hook),
		WithHandler("GET /sent", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "sent %d\n", hook.sent.Load())
		})))
	require.NoError(t, err)
	stop := running(t, d)

	t.Run("Health", func(t *testing.T) {
		require.NotEmpty(t, d.HTTPURL())
		for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\nok   store\nok   broker events\nok   claims\n"} {
			res, err := http.Get(d.HTTPURL() + path)
			require.NoError(t, err)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			require.Equal(t, http.StatusOK, res.StatusCode, path)
			require.Equal(t, want, string(body), path)
		}
	})

	testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == uint64(len(msgs)) },
		"the stream holds the %d messages", len(msgs))
	testsvc.Eventually(t, 10*time.Second, func() bool {
		st, err := store.Stats(context.Background())
		return err == nil && st.Pending == 0
	}, "every row acknowledged")
	get := func(path string) string {
		res, err := http.Get(d.HTTPURL() + path)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		body, _ := io.ReadAll(res.Body)
		return string(body)
	}
	// A batch's hooks run after its rows are settled, so the last batch's
	// report may trail the table by a moment.
	testsvc.Eventually(t, 10*time.Second, func() bool {
		return get("/sent") == fmt.Sprintf("sent %d\n", len(msgs))
	}, "the handler is mounted, the hooks see every relay")
	sentTotal := fmt.Sprintf(`outbox_relay_published_total{destination="ORDER_PAID",relay="default",result="sent"} %d`, len(msgs))
	testsvc.Eventually(t, 10*time.Second, func() bool { return strings.Contains(get("/metrics"), sentTotal) },
		"the metrics count every message sent")
	m := get("/metrics")
	require.Contains(t, m, `outbox_relay_up{relay="default"} 1`)
	require.Contains(t, m, `outbox_pending_messages{relay="default"}`, "the backlog is polled")
	require.Contains(t, m, `outbox_relay_publish_duration_seconds_count{relay="default"}`, "the publisher is timed")
	require.NoError(t, stop(), "a cancelled daemon stops cleanly")

	var want []string
	for _, m := range msgs {
		want = append(want, m.MessageID)
	}
	require.ElementsMatch(t, want, stream.messageIDs(t), "each message once, with its id as Nats-Msg-Id")

	st, err := store.Stats(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, len(msgs), st.SentLastMinute)

	out := logs.String()
	require.Contains(t, out, `"msg":"daemon started"`)
	require.Contains(t, out, `"relays":3`)
	require.Contains(t, out, `"msg":"daemon stopped"`)
	require.Equal(t, 3, strings.Count(out, `"msg":"relay stopped"`))
	require.NotContains(t, out, dsn.Value(), "never logs the DSN")
	require.NotContains(t, out, `{\"n\":`, "never logs payloads")
}

func TestRunStopsGracefullyMidBacklog(t *testing.T) {
	t.Parallel()
	dsn, db, store := sqliteDB(t)
	stream := newNATSStream(t)
	const total = 1000
	writeSQLite(t, db, store, "ITEM_ADDED", total)
	cfg := baseConfig(dsn, stream.broker("events"))
	cfg.Relays = 2
	cfg.BatchSize = 25
	d, err := New(cfg, nil)
	require.NoError(t, err)
	stop := running(t, d)
	testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) > 0 }, "publishing started")
	require.NoError(t, stop())

	// Every batch in flight at the stop was acknowledged: the stream holds
	// exactly the rows marked sent, no row was published and left pending.
	st, err := store.Stats(context.Background())
	require.NoError(t, err)
	published := stream.count(t)
	require.EqualValues(t, published, st.SentLastMinute, "published == acknowledged")
	require.EqualValues(t, total, st.Pending+st.SentLastMinute, "nothing lost")
	t.Logf("stopped with %d of %d sent", st.SentLastMinute, total)
}

func TestRunPostgresNotifyToNATS(t *testing.T) {
	t.Parallel()
	pool, _, dsn := testsvc.PostgresSchema(t)
	stream := newNATSStream(t)
	ctx := context.Background()
	writer, err := pgstore.New(pool, pgstore.WithNotify(true))
	require.NoError(t, err)
	require.NoError(t, writer.Migrate(ctx))

	app := testsvc.Name(t)
	cfg := baseConfig(config.NewSecret(dsn+"&application_name="+app), stream.broker("events"))
	cfg.PollInterval = time.Minute // only a notification can wake the relay in time
	cfg.Notify = true
	d, err := New(cfg, nil)
	require.NoError(t, err)
	stop := running(t, d)
	// Write only once the relay listens, so that only the notification can
	// explain a prompt delivery (the relay also looks once when it starts).
	testsvc.Eventually(t, 10*time.Second, func() bool {
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'",
			app).Scan(&n)
		return err == nil && n == 1
	}, "the relay listens")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	m := &outbox.Message{AggregateType: "order", AggregateID: "o-1", EventType: "ORDER_SHIPPED", Payload: []byte(`{}`)}
	require.NoError(t, outbox.NewWriter(writer).Write(ctx, tx, m))
	require.NoError(t, tx.Commit(ctx))

	testsvc.Eventually(t, 15*time.Second, func() bool { return stream.count(t) == 1 },
		"the notified relay publishes long before its one-minute poll")
	require.NoError(t, stop())
	require.Equal(t, []string{m.MessageID}, stream.messageIDs(t))
}

// TestRunPostgresHeldClaims drains a backlog with held_claims and several
// batches in flight per relay loop. The automatic pool gives each loop a
// connection per batch in flight, and the sent rows show that the claims were
// held: a row lease would have set next_retry_at, a held claim writes the row
// once, when the batch is settled.
func TestRunPostgresHeldClaims(t *testing.T) {
	t.Parallel()
	const rows = 600
	pool, _, dsn := testsvc.PostgresSchema(t)
	stream := newNATSStream(t)
	ctx := context.Background()
	writer, err := pgstore.New(pool)
	require.NoError(t, err)
	require.NoError(t, writer.Migrate(ctx))
	msgs := make([]*outbox.Message, rows)
	for i := range msgs {
		msgs[i] = &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i), EventType: "ORDER_PAID",
			Payload: []byte(`{}`)}
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter(writer).Write(ctx, tx, msgs...))
	require.NoError(t, tx.Commit(ctx))

	cfg := baseConfig(config.NewSecret(dsn), stream.broker("events"))
	cfg.HeldClaims, cfg.Ordering = true, false // held claims are for unordered relays
	cfg.Relays, cfg.MaxInFlight, cfg.BatchSize = 2, 4, 25
	_, logs, stop := startLogged(t, cfg)
	testsvc.Eventually(t, 30*time.Second, func() bool {
		var pending int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox_message WHERE status = 0").Scan(&pending)
		return err == nil && pending == 0 && stream.count(t) == rows
	}, "every row published and acknowledged")
	require.NoError(t, stop())

	var held int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox_message
		WHERE status = 1 AND retry_count = 1 AND next_retry_at IS NULL`).Scan(&held))
	require.Equal(t, rows, held, "every row sent by a held claim, its one attempt written when settled")
	require.Contains(t, logs.String(), fmt.Sprintf(`"db_max_conns":%d`, 2*4+config.SpareConns),
		"a connection per batch in flight per loop, plus the spares")
}

func TestRunFailsFastOnUnreachableServices(t *testing.T) {
	t.Parallel()
	dsn, _, _ := sqliteDB(t)
	stream := newNATSStream(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { taken.Close() })
	for _, tc := range []struct {
		name string
		cfg  *config.Config
		want string
	}{
		{"Database", baseConfig(config.NewSecret("postgres://postgres:hunter22@127.0.0.1:1/test?connect_timeout=2"), stream.broker("events")),
			"open postgres database:"},
		{"Broker", func() *config.Config {
			c := baseConfig(dsn)
			c.Broker = config.NewSecret("nats://u:hunter22@127.0.0.1:1")
			return c
		}(), "broker default: connect to nats:"},
		{"HTTPAddressInUse", func() *config.Config {
			c := baseConfig(dsn, stream.broker("events"))
			c.HTTP = taken.Addr().String()
			return c
		}(), "http server: listen tcp " + taken.Addr().String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := New(tc.cfg, nil)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = d.Run(ctx)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "hunter22")
			select {
			case <-d.Ready():
				t.Fatal("ready after a failed start")
			default:
			}
			require.ErrorIs(t, d.Run(ctx), ErrRunTwice)
		})
	}
}

func TestNewLogger(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	l, err := NewLogger(&b, "warn", "text")
	require.NoError(t, err)
	l.Info("hidden")
	l.Warn("shown")
	require.NotContains(t, b.String(), "hidden")
	require.Contains(t, b.String(), "msg=shown")
	_, err = NewLogger(&b, "loud", "text")
	require.Error(t, err)
	_, err = NewLogger(&b, "info", "xml")
	require.Error(t, err)
}

// TestNewLoggerEscapesTerminalControls logs an event type holding runes a
// terminal takes as commands: in either format, none reaches the output, and
// the JSON still decodes to the value.
func TestNewLoggerEscapesTerminalControls(t *testing.T) {
	t.Parallel()
	const hostile = "ORDER\x1b[31m\u009b2J\u202e\x7f\x07\r"
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			l, err := NewLogger(&b, "info", format)
			require.NoError(t, err)
			l.Warn("publish failed", "event_type", hostile)
			for i, r := range b.String() {
				require.True(t, r == '\n' || strconv.IsPrint(r), "byte %d: %U in %q", i, r, b.String())
			}
			if format == "json" {
				var rec map[string]any
				require.NoError(t, json.Unmarshal([]byte(b.String()), &rec))
				require.Equal(t, hostile, rec["event_type"])
			}
		})
	}
}

// sentCounter is a relay hook counting the messages sent.
type sentCounter struct{ sent atomic.Int64 }

func (c *sentCounter) OnBatch(ev outbox.BatchEvent) { c.sent.Add(int64(ev.Sent)) }

// syncBuffer is a strings.Builder safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// /readyz follows the broker: 503 naming it while the connection is cut,
// 200 again once it is back, and messages written meanwhile go out.
func TestReadinessFollowsBrokerOutage(t *testing.T) {
	t.Parallel()
	dsn, db, store := sqliteDB(t)
	stream := newNATSStream(t)
	b, proxy := stream.proxiedBroker(t, "events")
	cfg := baseConfig(dsn, b)
	cfg.HTTP = "127.0.0.1:0"
	cfg.ReadyzDetails = true // the checks below read the errors
	cfg.ProbeInterval, cfg.MaxProbeInterval = 100*time.Millisecond, 500*time.Millisecond
	d, err := New(cfg, nil)
	require.NoError(t, err)
	stop := running(t, d)

	ready := func() (int, string) { return getReadyz(t, d) }
	code, _ := ready()
	require.Equal(t, http.StatusOK, code)

	proxy.Cut()
	var body string
	testsvc.Eventually(t, 10*time.Second, func() bool {
		code, body = ready()
		return code == http.StatusServiceUnavailable
	}, "not ready while the broker is cut")
	require.Contains(t, body, "broker events:")
	require.NotContains(t, body, proxy.Addr(), "names the broker, not its URL")
	msgs := writeSQLite(t, db, store, "ORDER_PAID", 3)

	proxy.Restore()
	testsvc.Eventually(t, 15*time.Second, func() bool { code, _ := ready(); return code == http.StatusOK },
		"ready again once the broker is back")
	testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == uint64(len(msgs)) },
		"the messages written during the outage go out")
	require.NoError(t, stop())
}

// /readyz follows the database too: with PostgreSQL behind a proxy that
// resets every connection, 503 naming the store (and not its URL), then 200
// once the database is reachable again, and rows written meanwhile go out.
func TestReadinessFollowsDatabaseOutage(t *testing.T) {
	t.Parallel()
	pool, _, dsn := testsvc.PostgresSchema(t)
	ctx := context.Background()
	writer, err := pgstore.New(pool)
	require.NoError(t, err)
	require.NoError(t, writer.Migrate(ctx))
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := faultproxy.New(t, u.Host)
	u.Host = proxy.Addr()
	pw, ok := u.User.Password()
	if !ok { // trust auth ignores it; it is here to check that /readyz never shows it
		pw = "hunter22"
		u.User = url.UserPassword(u.User.Username(), pw)
	}
	stream := newNATSStream(t)
	cfg := baseConfig(config.NewSecret(u.String()), stream.broker("events"))
	cfg.HTTP = "127.0.0.1:0"
	cfg.ReadyzDetails = true // the checks below read the errors
	cfg.ProbeInterval, cfg.MaxProbeInterval = 100*time.Millisecond, 500*time.Millisecond
	d, err := New(cfg, nil)
	require.NoError(t, err)
	stop := running(t, d)

	ready := func() (int, string) { return getReadyz(t, d) }
	code, body := ready()
	require.Equal(t, http.StatusOK, code, body)

	proxy.Cut()
	testsvc.Eventually(t, 10*time.Second, func() bool {
		code, body = ready()
		return code == http.StatusServiceUnavailable
	}, "not ready while the database is cut")
	require.Contains(t, body, "FAIL store: pgstore: ping:", "names the database check")
	require.Contains(t, body, "ok   broker events", "the broker is still up")
	require.NotContains(t, body, u.String(), "names the database, not its URL")
	require.NotContains(t, body, pw)

	// Written straight to PostgreSQL, past the proxy: the relay cannot see
	// these rows until the database is back for it.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	msgs := make([]*outbox.Message, 3)
	for i := range msgs {
		msgs[i] = &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i), EventType: "ORDER_PAID",
			Payload: []byte(`{}`)}
	}
	require.NoError(t, outbox.NewWriter(writer).Write(ctx, tx, msgs...))
	require.NoError(t, tx.Commit(ctx))

	proxy.Restore()
	testsvc.Eventually(t, 15*time.Second, func() bool { code, body = ready(); return code == http.StatusOK },
		"ready again once the database is back")
	require.Contains(t, body, "ok   store")
	testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == uint64(len(msgs)) },
		"the messages written during the outage go out")
	require.NoError(t, stop())
}

// With a trace exporter, each publish gets a span, flushed when Run returns.
func TestRunTracesPublishes(t *testing.T) {
	t.Parallel()
	dsn, db, store := sqliteDB(t)
	stream := newNATSStream(t)
	cfg := baseConfig(dsn, stream.broker("events"))
	cfg.TraceExporter = "stdout"
	var spans syncBuffer
	d, err := New(cfg, nil, WithStdout(&spans))
	require.NoError(t, err)
	msgs := writeSQLite(t, db, store, "ORDER_PAID", 1)
	stop := running(t, d)
	testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == 1 }, "published")
	require.NoError(t, stop())
	out := spans.String()
	require.Contains(t, out, `"Name":"publish ORDER_PAID"`)
	require.Contains(t, out, msgs[0].MessageID, "the span names the message")
	require.Contains(t, out, `"Value":"nats"`, "the messaging system")
}
