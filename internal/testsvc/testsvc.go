// Package testsvc gives tests their own slice of the real services on this
// machine: a PostgreSQL schema, a MariaDB database, a SQLite file, and unique
// names for broker streams, topics and queues.
//
// Addresses come from OUTBOX_TEST_* environment variables with the defaults
// below (README.md, "Testing"). A test whose service is unreachable is skipped with the
// service's name, except when CI=true, where it fails.
package testsvc

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/internal/jsretry"
)

// Default addresses of the services, as .ci/run starts them.
const (
	DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultMySQL    = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
	DefaultRedis    = "redis://127.0.0.1:6379/0"
	DefaultAMQP     = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultNATS     = "nats://127.0.0.1:4222"
	DefaultMQTT     = "tcp://127.0.0.1:1883"
)

// InCI reports whether the tests run in CI (CI=true), where a missing service fails.
func InCI() bool { return os.Getenv("CI") == "true" }

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Unavailable skips t naming the service, or fails it under CI=true.
func Unavailable(t testing.TB, service string, err error) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s is required in CI but unreachable: %v", service, err)
	}
	t.Skipf("skipped: %s unreachable (%v); .ci/run shows how to start it", service, err)
}

var seq atomic.Int64

var nonWord = regexp.MustCompile(`[^a-z0-9_]+`)

// Name returns a name unique to this test run and test, of lower-case letters,
// digits and underscores, at most 48 bytes: for schemas, streams, topics, queues.
func Name(t testing.TB) string {
	base := nonWord.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(base) > 24 {
		base = base[len(base)-24:]
	}
	return fmt.Sprintf("t%d_%d_%s", os.Getpid()%100000, seq.Add(1), strings.Trim(base, "_"))
}

// PostgresURL returns the PostgreSQL URL for tests.
func PostgresURL() string { return env("OUTBOX_TEST_POSTGRES", DefaultPostgres) }

// PostgresSchema creates a schema of its own for t and returns a pool whose
// search_path points to it, the schema's name, and a DSN that opens
// connections with the same search_path (for child processes). The schema is
// dropped when t ends.
func PostgresSchema(t testing.TB) (*pgxpool.Pool, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		Unavailable(t, "PostgreSQL", err)
	}
	defer admin.Close(context.Background())
	schema := Name(t)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, PostgresURL())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
	})
	dsn := withQuery(PostgresURL(), "search_path", schema)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, schema, dsn
}

// MySQLDSN returns the go-sql-driver DSN for tests.
func MySQLDSN() string { return env("OUTBOX_TEST_MYSQL", DefaultMySQL) }

// MySQLDatabase creates a database of its own for t and returns a *sql.DB on
// it and its DSN. The database is dropped when t ends.
func MySQLDatabase(t testing.TB) (*sql.DB, string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(MySQLDSN())
	if err != nil {
		t.Fatalf("parse OUTBOX_TEST_MYSQL: %v", err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("open mysql: %v", err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		Unavailable(t, "MariaDB/MySQL", err)
	}
	name := Name(t)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec("DROP DATABASE IF EXISTS " + name)
	})
	cfg.DBName = name
	cfg.ParseTime = true
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("open mysql %s: %v", name, err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	return db, dsn
}

// SQLitePath returns a database file path in t's temporary directory.
func SQLitePath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "outbox.db")
}

// NATSURL returns the NATS URL for tests, failing or skipping t when the server is unreachable.
func NATSURL(t testing.TB) string {
	return reachable(t, "NATS JetStream", env("OUTBOX_TEST_NATS", DefaultNATS))
}

// RedisURL returns the Redis URL for tests, failing or skipping t when unreachable.
func RedisURL(t testing.TB) string {
	return reachable(t, "Redis", env("OUTBOX_TEST_REDIS", DefaultRedis))
}

// AMQPURL returns the RabbitMQ URL for tests, failing or skipping t when unreachable.
func AMQPURL(t testing.TB) string {
	return reachable(t, "RabbitMQ", env("OUTBOX_TEST_AMQP", DefaultAMQP))
}

// MQTTURL returns the MQTT broker URL for tests, failing or skipping t when unreachable.
func MQTTURL(t testing.TB) string {
	return reachable(t, "Mosquitto", env("OUTBOX_TEST_MQTT", DefaultMQTT))
}

// reachable dials the URL's host:port once.
func reachable(t testing.TB, service, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s URL %q: %v", service, raw, err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
	if err != nil {
		Unavailable(t, service, err)
		return raw
	}
	c.Close()
	return raw
}

func withQuery(raw, key, value string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// Eventually polls cond every 10 ms until it returns true or timeout passes, then fails t with msg.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CreateStream creates a JetStream stream for a test, retrying the server's
// transient "error creating store for stream" (see package jsretry), and
// fails t on any other error.
func CreateStream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	s, err := jsretry.CreateStream(t.Context(), js, cfg)
	if err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
	return s
}
