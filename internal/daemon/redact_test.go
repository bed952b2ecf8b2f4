package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
)

// TestNoSecretLeaves runs a relay from PostgreSQL to a webhook whose URL,
// headers and secret hold tokens, against a receiver that hangs up or
// answers 503 echoing what it got, then goes away. None of the tokens may
// reach the JSON log, a row's last_error, a span (stdout exporter) or the
// /readyz body.
func TestNoSecretLeaves(t *testing.T) {
	t.Parallel()
	const (
		dbPassword = "dbpass-1234" // trust auth ignores it
		password   = "pw"          // short: found only as a URL's part
		pathToken  = "T0PATHSECRET99"
		queryToken = "q-s3cr3t-value"
		bearer     = "tok-abc123xyz"
		signing    = "whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM="
	)
	secrets := []string{dbPassword, ":" + password + "@", pathToken, queryToken, bearer, signing}

	pool, _, dsn := testsvc.PostgresSchema(t)
	ctx := context.Background()
	writer, err := pgstore.New(pool)
	require.NoError(t, err)
	require.NoError(t, writer.Migrate(ctx))
	var msgs []*outbox.Message
	for i := range 3 {
		msgs = append(msgs, &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprint(i), EventType: "ORDER_PAID",
			Payload: []byte(`{}`)})
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter(writer).Write(ctx, tx, msgs...))
	require.NoError(t, tx.Commit(ctx))

	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			return
		}
		if posts.Add(1)%2 == 1 { // hang up
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "no: %s %s", r.Header.Get("Authorization"), r.URL)
	}))
	defer srv.Close()

	hook := strings.Replace(srv.URL, "://", "://alice:"+password+"@", 1) + "/hooks/" + pathToken +
		"/{destination}?api_key=" + queryToken
	broker := config.Broker{Name: "web", URL: config.NewSecret(hook), Secret: config.NewSecret(signing),
		Headers: map[string]config.Secret{"Authorization": config.NewSecret("Bearer " + bearer)}}
	cfg := baseConfig(config.NewSecret(strings.Replace(dsn, "postgres@", "postgres:"+dbPassword+"@", 1)), broker)
	cfg.HTTP = "127.0.0.1:0"
	cfg.TraceExporter = "stdout"
	cfg.BackoffBase, cfg.BackoffCap = 10*time.Millisecond, 50*time.Millisecond
	cfg.ProbeInterval, cfg.MaxProbeInterval = 20*time.Millisecond, 50*time.Millisecond
	cfg.MaxAttempts = 1000
	logs, traces := &syncBuffer{}, &syncBuffer{}
	logger, err := NewLogger(logs, "debug", "json")
	require.NoError(t, err)
	d, err := New(cfg, logger, WithStdout(traces))
	require.NoError(t, err)
	stop := running(t, d)

	testsvc.Eventually(t, 20*time.Second, func() bool { return posts.Load() >= 8 }, "hang-ups and echoes")
	var lastErrors []string
	testsvc.Eventually(t, 10*time.Second, func() bool {
		rows, err := pool.Query(ctx, "SELECT coalesce(last_error, '') FROM outbox_message")
		require.NoError(t, err)
		defer rows.Close()
		lastErrors = lastErrors[:0]
		for rows.Next() {
			var e string
			require.NoError(t, rows.Scan(&e))
			lastErrors = append(lastErrors, e)
		}
		return len(lastErrors) == 3 && lastErrors[0] != ""
	}, "rows carry their last error")

	srv.Close() // now every ping fails, with the URL in net/http's error
	var readyz string
	testsvc.Eventually(t, 10*time.Second, func() bool {
		res, err := http.Get(d.HTTPURL() + "/readyz")
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		readyz = string(body)
		return res.StatusCode == http.StatusServiceUnavailable
	}, "/readyz fails")
	require.NoError(t, stop())

	require.Contains(t, logs.String(), "503", "the failures were logged")
	require.Contains(t, traces.String(), "503", "the failures were traced")
	for _, s := range secrets {
		require.NotContains(t, logs.String(), s, "log")
		require.NotContains(t, traces.String(), s, "spans")
		require.NotContains(t, readyz, s, "/readyz")
		for _, e := range lastErrors {
			require.NotContains(t, e, s, "last_error")
		}
	}
}

// leaky is a publisher whose errors hold whatever it is told: a client
// library that prints its URL.
type leaky struct{ msg string }

func (l leaky) Publish(_ context.Context, msgs []*outbox.Message) []error {
	return outbox.ErrorsFor(len(msgs), outbox.Permanent(errors.New(l.msg)))
}

func (l leaky) Ping(context.Context) error { return outbox.Unavailable(errors.New(l.msg)) }

// The edge wrappers clean what any publisher or client says, keep the
// error's class, and clean every log record.
func TestRedactEdges(t *testing.T) {
	t.Parallel()
	red := redactorOf(
		config.NewSecret("postgres://u:pgpass99@db/shop"),
		config.NewSecret("redis://:ab@cache:6379/0"),
		config.NewSecret("https://h/in/{destination}?sig=azure-code-1"),
		config.NewSecret("Bearer tok-abc123xyz"),
	)
	leak := "dial redis://:ab@cache:6379/0 and https://h/in/ORDER_PAID?sig=azure-code-1 with pgpass99 and tok-abc123xyz"
	want := "dial redis://:REDACTED@cache:6379/0 and https://h/REDACTED?sig=REDACTED with REDACTED and REDACTED"

	pub := redactErrors(leaky{leak}, red)
	err := pub.Publish(t.Context(), []*outbox.Message{{}})[0]
	require.EqualError(t, err, want)
	require.True(t, outbox.IsPermanent(err), "the class survives")
	pinger, ok := pub.(outbox.Pinger)
	require.True(t, ok, "Ping is kept")
	err = pinger.Ping(t.Context())
	require.EqualError(t, err, want)
	require.True(t, outbox.IsUnavailable(err))

	var out syncBuffer
	log := redactLogs(slog.New(slog.NewJSONHandler(&out, nil)), red)
	log.With("url", leak).WithGroup("g").Error("failed "+leak, "error", errors.New(leak),
		slog.Group("inner", "text", leak), "n", 1)
	require.NotContains(t, out.String(), "pgpass99")
	require.NotContains(t, out.String(), "tok-abc123xyz")
	require.NotContains(t, out.String(), "azure-code-1")
	require.NotContains(t, out.String(), ":ab@")
	require.Equal(t, 4, strings.Count(out.String(), "dial redis://:REDACTED@cache"), out.String())
	require.Contains(t, out.String(), `"n":1`)
}
