package daemon

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/pgstore"
)

// frozenDB is a migrated database of t's own that the daemon reaches through
// a fault proxy, while the test writes and counts straight to it.
type frozenDB struct {
	url     string            // the daemon's URL, through the proxy
	proxy   *faultproxy.Proxy // between the daemon and the database
	write   func(t *testing.T, n int)
	pending func(t *testing.T) int64
}

func proxiedPostgres(t *testing.T) frozenDB {
	pool, _, dsn := testsvc.PostgresSchema(t)
	ctx := context.Background()
	s, err := pgstore.New(pool, pgstore.WithNotify(true))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := faultproxy.New(t, u.Host)
	u.Host = proxy.Addr()
	return frozenDB{url: u.String(), proxy: proxy,
		write: func(t *testing.T, n int) {
			require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return outbox.NewWriter(s).Write(ctx, tx, frozenMsgs(n)...)
			}))
		},
		pending: func(t *testing.T) int64 { return stats(t, s).Pending }}
}

func proxiedMySQL(t *testing.T) frozenDB {
	db, dsn := testsvc.MySQLDatabase(t)
	ctx := context.Background()
	s, err := mysqlstore.New(db)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	u, err := url.Parse(mysqlURL(t, dsn))
	require.NoError(t, err)
	proxy := faultproxy.New(t, u.Host)
	u.Host = proxy.Addr()
	return frozenDB{url: u.String(), proxy: proxy,
		write: func(t *testing.T, n int) {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, outbox.NewWriter[*sql.Tx](s).Write(ctx, tx, frozenMsgs(n)...))
			require.NoError(t, tx.Commit())
		},
		pending: func(t *testing.T) int64 { return stats(t, s).Pending }}
}

func frozenMsgs(n int) []*outbox.Message {
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i), EventType: "ORDER_PAID",
			Payload: []byte(`{}`)}
	}
	return msgs
}

func stats(t *testing.T, s outbox.Store) *outbox.Stats {
	t.Helper()
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	return st
}

// With the database black-holed (sockets open, nothing forwarded), the
// relay warns within the store timeout instead of waiting in silence, goes
// on once the database answers again and loses nothing, and a stop while it
// is frozen again takes at most the publish timeout plus StopGrace (and the
// second the daemon gives its connections to close), not the minute and more
// that pgx's pool gives a ping and a cancel request.
func TestDatabaseFreeze(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		open func(t *testing.T) frozenDB
	}{
		{"Postgres", proxiedPostgres},
		{"MySQL", proxiedMySQL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := tc.open(t)
			stream := newNATSStream(t)
			cfg := baseConfig(config.NewSecret(db.url), stream.broker("events"))
			cfg.HTTP = "127.0.0.1:0" // the stats poller and /readyz ask the database too
			cfg.StoreTimeout = time.Second
			cfg.Notify = tc.name == "Postgres"
			_, logs, stop := startLogged(t, cfg)

			db.write(t, 3)
			testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == 3 }, "published")

			db.proxy.Blackhole()
			frozen := time.Now()
			db.write(t, 3)
			const warning = `"level":"WARN","msg":"database call timed out, will retry"`
			testsvc.Eventually(t, cfg.StoreTimeout+3*time.Second, func() bool {
				return strings.Contains(logs.String(), warning)
			}, "a warning within the store timeout of the freeze")
			t.Logf("warned %v after the freeze", time.Since(frozen).Round(time.Millisecond))

			db.proxy.Restore()
			testsvc.Eventually(t, 30*time.Second, func() bool { return stream.count(t) == 6 },
				"the rows written during the freeze go out once the database answers")
			testsvc.Eventually(t, 20*time.Second, func() bool { return db.pending(t) == 0 }, "and are acknowledged")

			// Frozen again until a claim has timed out: pgx is now cancelling
			// it over a connection that gets no answer either.
			warned := strings.Count(logs.String(), warning)
			db.proxy.Blackhole()
			db.write(t, 1)
			testsvc.Eventually(t, cfg.StoreTimeout+3*time.Second, func() bool {
				return strings.Count(logs.String(), warning) > warned
			}, "a warning for the second freeze")
			stopsInTime(t, cfg, stop)
			db.proxy.Restore()
		})
	}
}

// The daemon adds read, write and dial timeouts to a mysql:// URL that names
// none, and keeps those it names (0 included: no timeout).
func TestMySQLTimeouts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     map[string]string
	}{
		{"None", "mysql://u:p@db:3306/shop",
			map[string]string{"readTimeout": "1m0s", "writeTimeout": "30s", "timeout": "10s"}},
		{"Named", "mysql://u:p@db:3306/shop?readTimeout=0&timeout=2s&tls=true",
			map[string]string{"readTimeout": "0", "writeTimeout": "30s", "timeout": "2s", "tls": "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := withMySQLTimeouts(tc.in)
			require.NoError(t, err)
			u, err := url.Parse(out)
			require.NoError(t, err)
			require.Equal(t, "u:p@db:3306", u.User.String()+"@"+u.Host)
			got := map[string]string{}
			for k, v := range u.Query() {
				got[k] = v[0]
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// With the broker's connection black-holed while a batch is at it, a stop
// still takes at most the publish timeout plus StopGrace (and the second for
// the database connections), and the batch is settled (made due again) in
// that time: the relay does not spend the grace asking the frozen broker
// whether it is down.
func TestBrokerFreezeStopIsBounded(t *testing.T) {
	t.Parallel()
	dsn, db, store := sqliteDB(t)
	stream := newNATSStream(t)
	b, proxy := stream.proxiedBroker(t, "events")
	cfg := baseConfig(dsn, b)
	_, logs, stop := startLogged(t, cfg)
	writeSQLite(t, db, store, "ORDER_PAID", 2)
	testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == 2 }, "published")

	proxy.Blackhole()
	writeSQLite(t, db, store, "ORDER_PAID", 2)
	testsvc.Eventually(t, 5*time.Second, func() bool {
		var n int
		require.NoError(t, db.QueryRow("SELECT count(*) FROM outbox_message WHERE status = 0 AND retry_count = 1").Scan(&n))
		return n == 2
	}, "the batch is claimed, and at the frozen broker")
	stopsInTime(t, cfg, stop)
	require.NotContains(t, logs.String(), "relay cycle failed while stopping",
		"the batch that timed out at the broker was released within the grace")
	proxy.Restore()
}

// stopsInTime stops a daemon and checks that Run returned within the
// publish timeout, outbox.StopGrace and the second its database connections
// get to close (and half a second for the test).
func stopsInTime(t *testing.T, cfg *config.Config, stop func() error) {
	t.Helper()
	stopped := time.Now()
	require.NoError(t, stop())
	took := time.Since(stopped)
	t.Logf("stopped in %v", took.Round(time.Millisecond))
	require.Less(t, took, cfg.PublishTimeout+outbox.StopGrace+closeGrace+500*time.Millisecond)
}
