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
//     NAME") answer a ping, else 503 with one line per failed check.
//
// Handlers given with [WithHandler] are mounted beside them.
func (d *Daemon) handler(reg prometheus.Gatherer, db *DB, brokers []openBroker) http.Handler {
	checks := []metrics.Check{metrics.PingCheck("store", scrubbedPinger{db.Store, d})}
	for _, b := range brokers {
		if p, ok := b.pub.(outbox.Pinger); ok {
			checks = append(checks, metrics.PingCheck("broker "+b.name, scrubbedPinger{p, d}))
		}
	}
	mux := metrics.NewServeMux(reg, checks...)
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

// serveHTTP serves h on ln until ctx is done, then shuts the server down
// gracefully.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
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
