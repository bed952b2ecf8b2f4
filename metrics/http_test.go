package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/metrics"
	"github.com/outboxkit/outbox/publisher/kafkapub"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// get fetches path from srv and returns the status and body.
func get(t *testing.T, srv *httptest.Server, path string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// pgBehindProxy returns a pgstore whose every connection goes through a fault proxy.
func pgBehindProxy(t *testing.T) (*pgstore.Store, *faultproxy.Proxy) {
	t.Helper()
	_, _, dsn := testsvc.PostgresSchema(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	proxy := faultproxy.New(t, net.JoinHostPort(cfg.ConnConfig.Host, itoa(cfg.ConnConfig.Port)))
	host, port, err := net.SplitHostPort(proxy.Addr())
	require.NoError(t, err)
	cfg.ConnConfig.Host = host
	cfg.ConnConfig.Port = atoui16(t, port)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := pgstore.New(pool)
	require.NoError(t, err)
	return store, proxy
}

// kafkaBehindProxy returns a kafkapub publisher on an in-process Kafka whose
// every connection goes through a fault proxy.
func kafkaBehindProxy(t *testing.T) (*kafkapub.Publisher, *faultproxy.Proxy) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	proxy := faultproxy.New(t, c.ListenAddrs()[0])
	var d net.Dialer
	cl, err := kgo.NewClient(kgo.SeedBrokers(proxy.Addr()),
		kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, proxy.Addr())
		}))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	pub, err := kafkapub.New(cl)
	require.NoError(t, err)
	return pub, proxy
}

// TestReadyzFlips takes the database away and back, then the broker, and
// watches /readyz say which one is missing, while /healthz stays 200.
func TestReadyzFlips(t *testing.T) {
	t.Parallel()
	store, db := pgBehindProxy(t)
	pub, broker := kafkaBehindProxy(t)
	storeCheck, brokerCheck := metrics.PingCheck("store", store), metrics.PingCheck("broker kafka", pub)
	storeCheck.Timeout, brokerCheck.Timeout = time.Second, time.Second
	srv := httptest.NewServer(metrics.NewServeMuxWith(prometheus.NewRegistry(),
		metrics.NewReadyz(metrics.ReadyzOptions{Details: true}, storeCheck, brokerCheck)))
	t.Cleanup(srv.Close)

	readyz := func() (int, string) { return get(t, srv, "/readyz") }
	waitFor := func(status int, lines ...string) {
		t.Helper()
		var code int
		var body string
		testsvc.Eventually(t, 15*time.Second, func() bool {
			code, body = readyz()
			if code != status {
				return false
			}
			for _, l := range lines {
				if !strings.Contains(body, l) {
					return false
				}
			}
			return true
		}, "/readyz did not answer %d with %q; last answer %d:\n%s", status, lines, code, body)
	}

	waitFor(http.StatusOK, "ready\n", "ok   store\n", "ok   broker kafka\n")

	db.Cut()
	waitFor(http.StatusServiceUnavailable, "not ready\n", "FAIL store: pgstore: ping:", "ok   broker kafka\n")
	code, body := get(t, srv, "/healthz")
	require.Equal(t, http.StatusOK, code, "liveness does not depend on the database")
	require.Equal(t, "ok\n", body)
	db.Restore()
	waitFor(http.StatusOK, "ok   store\n", "ok   broker kafka\n")

	broker.Cut()
	waitFor(http.StatusServiceUnavailable, "ok   store\n", "FAIL broker kafka: kafkapub: ping:")
	broker.Restore()
	waitFor(http.StatusOK, "ok   store\n", "ok   broker kafka\n")
}

func TestReadyzReports(t *testing.T) {
	t.Parallel()
	failing := metrics.Check{Name: "cache", Probe: func(context.Context) error { return io.ErrUnexpectedEOF }}
	hanging := metrics.Check{Name: "slow", Timeout: 20 * time.Millisecond, Probe: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}}
	passing := metrics.Check{Name: "db", Probe: func(context.Context) error { return nil }}
	for _, tc := range []struct {
		name   string
		checks []metrics.Check
		status int
		text   string
		json   metrics.ReadyResult
	}{
		{"NoChecks", nil, http.StatusOK, "ready\n", metrics.ReadyResult{Ready: true, Checks: []metrics.CheckResult{}}},
		{"AllPass", []metrics.Check{passing}, http.StatusOK, "ready\nok   db\n",
			metrics.ReadyResult{Ready: true, Checks: []metrics.CheckResult{{Name: "db", OK: true}}}},
		{"OneFails", []metrics.Check{passing, failing}, http.StatusServiceUnavailable,
			"not ready\nok   db\nFAIL cache: unexpected EOF\n",
			metrics.ReadyResult{Checks: []metrics.CheckResult{{Name: "db", OK: true},
				{Name: "cache", Error: "unexpected EOF"}}}},
		{"TimesOut", []metrics.Check{hanging}, http.StatusServiceUnavailable,
			"not ready\nFAIL slow: no answer within 20ms: context deadline exceeded\n",
			metrics.ReadyResult{Checks: []metrics.CheckResult{{Name: "slow",
				Error: "no answer within 20ms: context deadline exceeded"}}}},
		{"NoProbe", []metrics.Check{{Name: "empty"}}, http.StatusServiceUnavailable,
			"not ready\nFAIL empty: check has no probe\n",
			metrics.ReadyResult{Checks: []metrics.CheckResult{{Name: "empty", Error: "check has no probe"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(metrics.NewReadyz(metrics.ReadyzOptions{Details: true}, tc.checks...))
			t.Cleanup(srv.Close)
			code, body := get(t, srv, "/")
			require.Equal(t, tc.status, code)
			require.Equal(t, tc.text, body)

			code, body = get(t, srv, "/", "Accept", "application/json")
			require.Equal(t, tc.status, code)
			var got metrics.ReadyResult
			require.NoError(t, json.Unmarshal([]byte(body), &got))
			require.Equal(t, tc.json, got)
		})
	}
}

// By default /readyz says which check failed, not why: a driver's error can
// name a user, a database or an internal host.
func TestReadyzHidesErrorsByDefault(t *testing.T) {
	t.Parallel()
	secret := errors.New(`failed to connect to user=app database=orders host=db-7.internal`)
	checks := []metrics.Check{
		{Name: "store", Probe: func(context.Context) error { return secret }},
		{Name: "broker nats", Probe: func(context.Context) error { return nil }},
	}
	srv := httptest.NewServer(metrics.Readyz(checks...))
	t.Cleanup(srv.Close)
	code, body := get(t, srv, "/")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready\nFAIL store\nok   broker nats\n", body)
	code, body = get(t, srv, "/", "Accept", "application/json")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.NotContains(t, body, "db-7")
	var got metrics.ReadyResult
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.Equal(t, metrics.ReadyResult{Checks: []metrics.CheckResult{{Name: "store"}, {Name: "broker nats", OK: true}}}, got)
}

// A flood of /readyz requests costs one round of probes: the requests that
// arrive while a round runs share it, and those within the cache period get
// its result.
func TestReadyzCoalescesAndCaches(t *testing.T) {
	t.Parallel()
	var probes [2]atomic.Int64
	release := make(chan struct{})
	checks := []metrics.Check{
		{Name: "store", Probe: func(context.Context) error { probes[0].Add(1); <-release; return nil }},
		{Name: "broker", Probe: func(context.Context) error { probes[1].Add(1); <-release; return nil }},
	}
	srv := httptest.NewServer(metrics.NewReadyz(metrics.ReadyzOptions{CacheFor: time.Hour}, checks...))
	t.Cleanup(srv.Close)
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before srv.Close, should the test fail with probes blocked
	const n = 50
	var wg sync.WaitGroup
	codes := make(chan int, n)
	for range n {
		wg.Go(func() {
			code, _ := get(t, srv, "/")
			codes <- code
		})
	}
	testsvc.Eventually(t, 5*time.Second, func() bool { return probes[0].Load() == 1 && probes[1].Load() == 1 },
		"one round for every request")
	free()
	wg.Wait()
	close(codes)
	for code := range codes {
		require.Equal(t, http.StatusOK, code)
	}
	code, _ := get(t, srv, "/")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, int64(1), probes[0].Load(), "one probe of the store for %d requests", n+1)
	require.Equal(t, int64(1), probes[1].Load(), "one probe of the broker for %d requests", n+1)
}

func TestServeMuxServesMetrics(t *testing.T) {
	t.Parallel()
	reg := metrics.NewRegistry()
	m, err := metrics.NewMetrics(reg, metrics.WithRelayName("orders"))
	require.NoError(t, err)
	m.SetUp(true)
	srv := httptest.NewServer(metrics.NewServeMux(reg))
	t.Cleanup(srv.Close)

	code, body := get(t, srv, "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `outbox_relay_up{relay="orders"} 1`)
	require.Contains(t, body, "go_goroutines", "NewRegistry adds the Go collector")
	require.Contains(t, body, "process_start_time_seconds", "NewRegistry adds the process collector")

	code, _ = get(t, srv, "/nothing")
	require.Equal(t, http.StatusNotFound, code)
	require.Panics(t, func() { metrics.PingCheck("x", nil) })
}
