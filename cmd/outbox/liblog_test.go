package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/mysqlstore"
)

// output collects the lines a process writes to one of its pipes.
type output struct {
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

func collect(r io.Reader) *output {
	o := &output{done: make(chan struct{})}
	go func() {
		defer close(o.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			o.mu.Lock()
			o.lines = append(o.lines, sc.Text())
			o.mu.Unlock()
		}
	}()
	return o
}

// has reports whether a line holds every one of parts.
func (o *output) has(parts ...string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range o.lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}

func (o *output) all() []string {
	<-o.done
	return o.lines
}

// The MySQL driver and go-redis print their own lines when a connection goes
// bad ("[mysql] ... closing bad idle connection", "redis: connection pool:
// failed to dial"): with JSON logs, every line the relay writes, theirs
// included, is JSON.
func TestRelayLogsOnlyJSON(t *testing.T) {
	t.Parallel()
	admin, dsn := testsvc.MySQLDatabase(t)
	mc, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	user := url.User(mc.User)
	if mc.Passwd != "" {
		user = url.UserPassword(mc.User, mc.Passwd)
	}
	dbURL := (&url.URL{Scheme: "mysql", User: user, Host: mc.Addr, Path: "/" + mc.DBName}).String()
	out, err := command(t.Context(), "migrate", "--db", dbURL).CombinedOutput()
	require.NoError(t, err, "%s", out)

	redisURL, err := url.Parse(testsvc.RedisURL(t))
	require.NoError(t, err)
	proxy, err := faultproxy.Start(redisURL.Host)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	redisURL.Host = proxy.Addr()

	cfg := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(
		"db: %s\nbrokers:\n  - name: cache\n    url: %s\n    prefix: %s.\nlog_format: json\npoll_interval: 50ms\n",
		dbURL, redisURL, testsvc.Name(t))), 0o600))
	cmd := command(t.Context(), "relay", "--config", cfg)
	stdoutPipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderrPipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	stdout, stderr := collect(stdoutPipe), collect(stderrPipe)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	testsvc.Eventually(t, 20*time.Second, func() bool { return stderr.has(`"msg":"relay started"`) },
		"the relay starts")

	// The server kills the relay's connections: the driver finds them dead.
	testsvc.Eventually(t, 20*time.Second, func() bool {
		killConnections(t, admin, mc.DBName)
		return stderr.has("mysql", "bad idle connection") || stderr.has("mysql", "EOF") ||
			stderr.has("mysql", "invalid connection")
	}, "the MySQL driver reports a connection killed under it")

	// Redis goes away while a message waits: go-redis fails to dial.
	require.NoError(t, proxy.Close())
	s, err := mysqlstore.New(admin)
	require.NoError(t, err)
	tx, err := admin.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter[*sql.Tx](s).Write(t.Context(), tx, &outbox.Message{
		AggregateType: "order", AggregateID: "1", EventType: "ORDER_PAID", Payload: []byte(`{}`)}))
	require.NoError(t, tx.Commit())
	testsvc.Eventually(t, 30*time.Second, func() bool { return stderr.has("redis", "dial") },
		"go-redis reports that it cannot dial")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	for name, o := range map[string]*output{"stdout": stdout, "stderr": stderr} {
		for _, l := range o.all() {
			require.True(t, json.Valid([]byte(l)), "a %s line that is not JSON: %s", name, l)
		}
	}
	require.NoError(t, cmd.Wait())
	require.True(t, stderr.has(`"component":"mysql"`), "the driver's line is the relay's")
	require.True(t, stderr.has(`"component":"redis"`), "go-redis's line is the relay's")
}

// killConnections kills every connection to database db but admin's own.
func killConnections(t *testing.T, admin *sql.DB, db string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := admin.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var ids sql.NullString // numbers the server gives, comma-separated
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT GROUP_CONCAT(id) FROM information_schema.processlist "+
		"WHERE db = ? AND id <> CONNECTION_ID()", db).Scan(&ids))
	for id := range strings.SplitSeq(ids.String, ",") {
		if id != "" {
			_, _ = conn.ExecContext(ctx, "KILL "+id)
		}
	}
}
