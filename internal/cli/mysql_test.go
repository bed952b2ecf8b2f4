package cli

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/mysqlstore"
)

// mysqlUser creates a MariaDB/MySQL database and a user with a password
// that may use only it, both of t's own, and returns the
// mysql://user:pass@host:port/db URL the CLI takes, the password, and a
// *sql.DB on the database (UTC session, as mysqlstore.Open makes it).
func mysqlUser(t *testing.T) (string, string, *sql.DB) {
	t.Helper()
	_, dsn := testsvc.MySQLDatabase(t)
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	require.Equal(t, "tcp", cfg.Net, "the CLI reaches MySQL over TCP")
	admin, err := mysqlstore.Open(dsn)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })

	// Account statements take no placeholders; both names are [A-Za-z0-9_-].
	user, password := testsvc.Name(t), "Pw-"+strings.ToUpper(testsvc.Name(t))
	ctx := t.Context()
	_, err = admin.ExecContext(ctx, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, password))
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), fmt.Sprintf("DROP USER '%s'@'%%'", user)) })
	_, err = admin.ExecContext(ctx, fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", cfg.DBName, user))
	require.NoError(t, err)

	u := url.URL{Scheme: "mysql", User: url.UserPassword(user, password), Host: cfg.Addr, Path: "/" + cfg.DBName}
	return u.String(), password, admin
}

// TestMigrateAndStatusMySQL runs `outbox migrate` and `outbox status` on a
// mysql:// URL with a user and password.
func TestMigrateAndStatusMySQL(t *testing.T) {
	t.Parallel()
	dsn, password, db := mysqlUser(t)
	for range 2 { // idempotent
		r := run(t.Context(), "migrate", "--db", dsn)
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Equal(t, "migrated table outbox_message (mysql)\n", r.stdout)
	}
	require.Equal(t, statusJSON{Table: "outbox_message"}, statusOf(t, "--db", dsn))

	msgs := writeMySQL(t, db, 3)
	st := statusOf(t, "--db", dsn)
	require.EqualValues(t, len(msgs), st.Pending)
	require.Greater(t, st.OldestPendingSeconds, 0.0)
	require.Less(t, st.OldestPendingSeconds, 600.0, "ages are measured in UTC on both sides")
	require.Zero(t, st.Dead)

	r := run(t.Context(), "status", "--db", dsn)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^pending\s+3$`, r.stdout)

	// A wrong password: one clean line, no password in it.
	bad := strings.Replace(dsn, url.QueryEscape(password), "hunter22", 1)
	require.NotEqual(t, dsn, bad)
	r = run(t.Context(), "status", "--db", bad)
	require.Equal(t, ExitRuntime, r.code, r.stderr)
	line := requireOneLine(t, r)
	require.Contains(t, line, "Access denied")
	require.NotContains(t, r.stderr, "hunter22")
	require.NotContains(t, r.stderr, password)
}

// TestRelayMySQLToNATS runs `outbox relay --db mysql://user:pass@host:port/db`
// against the real NATS until every message is in the stream and marked
// sent, then stops it as SIGTERM would.
func TestRelayMySQLToNATS(t *testing.T) {
	t.Parallel()
	dsn, password, db := mysqlUser(t)
	ns := testsvc.NewJetStream(t)
	natsURL := ns.URL
	r := run(t.Context(), "migrate", "--db", dsn)
	require.Equal(t, ExitOK, r.code, r.stderr)
	msgs := writeMySQL(t, db, 5)

	js, stream := ns.JS, ns.Name
	prefix := strings.ToLower(stream) + "."
	cfgFile := writeFile(t, "relay.yaml", fmt.Sprintf(`
brokers:
  - name: events
    url: %s
    stream: %s
    prefix: %q
log_format: text
`, natsURL, stream, prefix))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- run(ctx, "relay", "--config", cfgFile, "--db", dsn, "--poll-interval", "50ms")
	}()
	s, err := mysqlstore.New(db)
	require.NoError(t, err)
	testsvc.Eventually(t, 20*time.Second, func() bool {
		select {
		case r := <-done:
			t.Fatalf("relay exited early: %d %s", r.code, r.stderr)
		default:
		}
		st, err := s.Stats(t.Context())
		return err == nil && st.Pending == 0
	}, "every row acknowledged")

	cancel()
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("relay did not exit within 20 s of the cancel")
	}
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, r.stderr, `msg="daemon stopped"`)
	require.NotContains(t, r.stderr, password, "the DSN is never logged")

	sctx, scancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer scancel()
	js2, err := js.Stream(sctx, stream)
	require.NoError(t, err)
	info, err := js2.Info(sctx)
	require.NoError(t, err)
	require.EqualValues(t, len(msgs), info.State.Msgs)
	for _, m := range msgs {
		got, err := js2.GetLastMsgForSubject(sctx, prefix+m.EventType)
		require.NoError(t, err)
		require.Equal(t, m.MessageID, got.Header.Get(jetstream.MsgIDHeader))
	}
	require.Equal(t, statusJSON{Table: "outbox_message", SentLastMinute: 5, SentLastHour: 5},
		statusOf(t, "--db", dsn))
}

// writeMySQL commits n messages, one event type each, through the store's Writer.
func writeMySQL(t *testing.T, db *sql.DB, n int) []*outbox.Message {
	t.Helper()
	s, err := mysqlstore.New(db)
	require.NoError(t, err)
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprint(i), EventType: fmt.Sprintf("ORDER_%d", i),
			Payload: []byte(`{"total":12}`)}
	}
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter[*sql.Tx](s).Write(t.Context(), tx, msgs...))
	require.NoError(t, tx.Commit())
	return msgs
}
