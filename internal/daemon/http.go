package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/metrics"
)

// handler returns the daemon's HTTP routes (package metrics builds them):
//
//   - /metrics: the relays' metrics and the table's backlog, from reg;
//   - /healthz: 200 while the process runs (liveness);
//   - /readyz: 200 when the database ("store") and every broker ("broker
//     NAME") answer a ping and the relays' claims are not failing
//     ("claims", see claimHealth), else 503 with one line per failed check
//     (with its error when the config sets readyz_details). A round of
//     checks serves the requests of the next second (metrics.NewReadyz).
//
// Handlers given with [WithHandler] are mounted beside them.
func (d *Daemon) handler(reg prometheus.Gatherer, db *DB, brokers []openBroker, claims *claimHealth) http.Handler {
	checks := []metrics.Check{metrics.PingCheck("store", scrubbedPinger{db.Store, d})}
	for _, b := range brokers {
		if p, ok := b.pub.(outbox.Pinger); ok {
			checks = append(checks, metrics.PingCheck("broker "+b.name, scrubbedPinger{p, d}))
		}
	}
	checks = append(checks, metrics.Check{Name: "claims", Probe: func(ctx context.Context) error {
		return d.scrubAll(claims.Probe(ctx))
	}})
	mux := metrics.NewServeMuxWith(reg, metrics.NewReadyz(metrics.ReadyzOptions{Details: d.cfg.ReadyzDetails}, checks...))
	for pattern, h := range d.opts.handlers {
		mux.Handle(pattern, h)
	}
	return mux
}

// scrubbedPinger hides the config's secrets in a ping's error, which /readyz shows.
type scrubbedPinger struct {
	p outbox.Pinger
	d *Daemon
}

func (s scrubbedPinger) Ping(ctx context.Context) error { return s.d.scrubAll(s.p.Ping(ctx)) }

// The HTTP server's timeouts: a client gets 5 s to send its request and
// 30 s to read the answer (a scrape of /metrics or a /readyz waiting for its
// checks takes far less), and an idle keep-alive connection is closed
// after a minute, so that slow or idle clients cannot hold connections.
const (
	httpReadTimeout  = 5 * time.Second
	httpWriteTimeout = 30 * time.Second
	httpIdleTimeout  = time.Minute
)

// newHTTPServer returns the server of h, with the timeouts above, whose
// requests' contexts end only with a forced close, not with ctx.
func newHTTPServer(ctx context.Context, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpReadTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
}

// serveHTTP serves h on ln until ctx is done, then shuts the server down
// gracefully.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := newHTTPServer(ctx, h)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", err)
	}
	return nil
}
