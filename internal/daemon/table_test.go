package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/metrics"
)

// A relay on a table it cannot work on does not start: Run fails before
// "daemon started" with every problem of the table and how to fix it.
func TestRunRefusesATableTheRelayCannotUse(t *testing.T) {
	t.Parallel()
	pgTable := func(ddl string) func(t *testing.T) config.Secret {
		return func(t *testing.T) config.Secret {
			pool, _, dsn := testsvc.PostgresSchema(t)
			if ddl != "" {
				_, err := pool.Exec(context.Background(), ddl)
				require.NoError(t, err)
			}
			return config.NewSecret(dsn)
		}
	}
	myTable := func(ddl string) func(t *testing.T) config.Secret {
		return func(t *testing.T) config.Secret {
			db, dsn := testsvc.MySQLDatabase(t)
			_, err := db.ExecContext(context.Background(), ddl)
			require.NoError(t, err)
			return config.NewSecret(mysqlURL(t, dsn))
		}
	}
	contractPG := `CREATE TABLE outbox_message (id bigserial PRIMARY KEY, message_id text, aggregate_type text,
aggregate_id text, event_type text, payload %s, status %s, retry_count int NOT NULL DEFAULT 0,
next_retry_at %s, created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now())`
	tests := []struct {
		name  string
		table string // config's table; "" for the default
		db    func(t *testing.T) config.Secret
		want  []string
	}{
		{name: "PostgresMisspeltTable", table: "outbox_mesage", db: pgTable(""),
			want: []string{"check table: outbox: table outbox_mesage cannot be used by the relay",
				"table outbox_mesage not found in the schemas of search_path", "run `outbox migrate`"}},
		{name: "PostgresByteaPayload", db: pgTable(fmt.Sprintf(contractPG, "bytea", "smallint NOT NULL DEFAULT 0", "timestamptz")),
			want: []string{"column payload is bytea", "USING convert_from(payload, 'UTF8')::jsonb"}},
		{name: "PostgresTextColumns", db: pgTable(fmt.Sprintf(contractPG, "jsonb", "text", "text")),
			want: []string{"column next_retry_at is text", "column status is text"}},
		{name: "PostgresMissingColumns", db: pgTable(`CREATE TABLE outbox_message (id bigserial, message_id text, payload jsonb)`),
			want: []string{"missing contract columns: aggregate_type, aggregate_id, event_type, status, retry_count, next_retry_at, created_at, updated_at"}},
		{name: "MariaDBMissingColumns", db: myTable(`CREATE TABLE outbox_message (id BIGINT PRIMARY KEY, message_id VARCHAR(64))`),
			want: []string{"missing contract columns: aggregate_type"}},
		{name: "MariaDBDateLease", db: myTable(`CREATE TABLE outbox_message (id BIGINT AUTO_INCREMENT PRIMARY KEY,
message_id VARCHAR(64), aggregate_type VARCHAR(64), aggregate_id VARCHAR(64), event_type VARCHAR(64), payload JSON,
status TINYINT NOT NULL DEFAULT 0, retry_count INT NOT NULL DEFAULT 0, next_retry_at DATE NULL,
created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))`),
			want: []string{"column next_retry_at is date", "want DATETIME(6)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stream := newNATSStream(t)
			cfg := baseConfig(tt.db(t), stream.broker("events"))
			if tt.table != "" {
				cfg.Table = tt.table
			}
			cfg.HTTP = "127.0.0.1:0"
			logs := &syncBuffer{}
			logger, err := NewLogger(logs, "info", "json")
			require.NoError(t, err)
			d, err := New(cfg, logger)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = d.Run(ctx)
			var te *outbox.TableError
			require.True(t, errors.As(err, &te), "got %v", err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
			require.NotContains(t, logs.String(), "daemon started")
			select {
			case <-d.Ready():
				t.Fatal("ready on a table the relay cannot use")
			default:
			}
		})
	}
}

// /readyz follows the claims, not only the pings: a table changed under a
// running relay (a column renamed) fails every claim while both the database
// and the broker answer, which makes /readyz 503 naming the claims, and 200
// again once the table is put back.
func TestReadinessFollowsFailingClaims(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		db   func(t *testing.T) (config.Secret, func(sql string))
	}{
		{"Postgres", func(t *testing.T) (config.Secret, func(string)) {
			pool, _, dsn := testsvc.PostgresSchema(t)
			return config.NewSecret(dsn), func(sql string) {
				_, err := pool.Exec(context.Background(), sql)
				require.NoError(t, err)
			}
		}},
		{"MariaDB", func(t *testing.T) (config.Secret, func(string)) {
			db, dsn := testsvc.MySQLDatabase(t)
			return config.NewSecret(mysqlURL(t, dsn)), func(sql string) {
				_, err := db.ExecContext(context.Background(), sql)
				require.NoError(t, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn, exec := tc.db(t)
			db, err := OpenDB(context.Background(), dsn, DBParams{})
			require.NoError(t, err)
			require.NoError(t, db.Store.Migrate(context.Background()))
			db.Close()
			stream := newNATSStream(t)
			cfg := baseConfig(dsn, stream.broker("events"))
			cfg.HTTP = "127.0.0.1:0"
			d, err := New(cfg, nil)
			require.NoError(t, err)
			stop := running(t, d)
			ready := func() (int, string) { return getReadyz(t, d) }
			var code int
			var body string
			testsvc.Eventually(t, 10*time.Second, func() bool { code, body = ready(); return code == http.StatusOK },
				"ready on a good table")
			require.Contains(t, body, "ok   claims")

			exec("ALTER TABLE outbox_message RENAME COLUMN retry_count TO retries")
			testsvc.Eventually(t, 15*time.Second, func() bool {
				code, body = ready()
				return code == http.StatusServiceUnavailable
			}, "not ready while every claim fails")
			require.Contains(t, body, "ok   store", "the database answers pings")
			require.Contains(t, body, "ok   broker events")
			require.Contains(t, body, "FAIL claims\n", "no details without readyz_details")

			exec("ALTER TABLE outbox_message RENAME COLUMN retries TO retry_count")
			testsvc.Eventually(t, 30*time.Second, func() bool { code, body = ready(); return code == http.StatusOK },
				"ready again once the table is back")
			require.NoError(t, stop())
		})
	}
}

// The HTTP server bounds every phase of a connection, so that slow or idle
// clients cannot hold connections open.
func TestHTTPServerTimeouts(t *testing.T) {
	t.Parallel()
	srv := newHTTPServer(context.Background(), http.NotFoundHandler())
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": srv.ReadHeaderTimeout,
		"ReadTimeout": srv.ReadTimeout, "WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout} {
		require.Positive(t, d, name)
	}
	require.Greater(t, srv.WriteTimeout, metrics.DefaultCheckTimeout, "a /readyz waiting for its checks can answer")
}

// A relay on a table with only the contract's indexes starts, and says at
// start which index its claims would use and how to create it.
func TestRunWarnsOfMissingIndexes(t *testing.T) {
	t.Parallel()
	pool, _, dsn := testsvc.PostgresSchema(t)
	_, err := pool.Exec(context.Background(), `CREATE TABLE outbox_message (id bigserial PRIMARY KEY,
message_id varchar(64) UNIQUE, aggregate_type varchar(64), aggregate_id varchar(64), event_type varchar(64),
payload jsonb, status smallint NOT NULL DEFAULT 0, retry_count int NOT NULL DEFAULT 0, next_retry_at timestamptz NULL,
created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON outbox_message (status, next_retry_at); CREATE INDEX ON outbox_message (aggregate_type, aggregate_id)`)
	require.NoError(t, err)
	stream := newNATSStream(t)
	cfg := baseConfig(config.NewSecret(dsn), stream.broker("events"))
	logs := &syncBuffer{}
	logger, err := NewLogger(logs, "info", "json")
	require.NoError(t, err)
	d, err := New(cfg, logger)
	require.NoError(t, err)
	stop := running(t, d)
	<-d.Ready()
	require.NoError(t, stop())
	out := logs.String()
	require.Contains(t, out, "table lacks an index the relay would use")
	require.Contains(t, out, `CREATE INDEX CONCURRENTLY \"outbox_message_pending_idx\" ON \"outbox_message\" (id) WHERE status = 0`)
	require.Contains(t, out, "daemon started", "a missing index does not stop the start")
}
