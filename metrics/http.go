package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultCheckTimeout bounds a readiness check whose Timeout is 0.
const DefaultCheckTimeout = 2 * time.Second

// Check is one readiness condition of /readyz, such as "the database answers".
type Check struct {
	// Name identifies the check in the response, e.g. "store" or "broker nats".
	Name string
	// Probe returns nil when the condition holds. It must honour ctx.
	Probe func(ctx context.Context) error
	// Timeout bounds Probe. Default: DefaultCheckTimeout (2 s).
	Timeout time.Duration
}

// PingCheck returns a Check named name that pings p (a store or a publisher
// implementing outbox.Pinger). It panics if p is nil, a programmer error.
func PingCheck(name string, p outbox.Pinger) Check {
	if p == nil {
		panic("metrics: PingCheck with a nil Pinger")
	}
	return Check{Name: name, Probe: p.Ping}
}

// NewRegistry returns a new registry holding the Go runtime and process
// collectors, the usual base for a daemon's /metrics. It is not the global
// registry.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// NewServeMux returns the daemon's HTTP handler: /metrics serves what g
// gathers (a *prometheus.Registry is one), /healthz is [Healthz] and /readyz
// is [Readyz] over checks. The handler is safe for concurrent use.
func NewServeMux(g prometheus.Gatherer, checks ...Check) *http.ServeMux {
	return NewServeMuxWith(g, Readyz(checks...))
}

// NewServeMuxWith is [NewServeMux] with readyz (from [NewReadyz]) at /readyz.
func NewServeMuxWith(g prometheus.Gatherer, readyz http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.Handle("GET /healthz", Healthz())
	mux.Handle("GET /readyz", readyz)
	return mux
}

// Healthz returns a handler that answers 200 "ok" for as long as the process
// serves HTTP: a liveness probe, which must not depend on the database or the
// broker (restarting the relay fixes neither).
func Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintln(w, "ok")
	})
}

// CheckResult is the outcome of one Check, as /readyz reports it in JSON.
type CheckResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// ReadyResult is the body of /readyz in JSON.
type ReadyResult struct {
	Ready  bool          `json:"ready"`
	Checks []CheckResult `json:"checks"`
}

// DefaultReadyCache is how long a round of readiness checks answers the
// requests that follow it, by default.
const DefaultReadyCache = time.Second

// ReadyzOptions tune [NewReadyz].
type ReadyzOptions struct {
	// Details shows each failed check's error in the body. Driver and broker
	// errors can name users, databases and internal hosts, and /readyz is
	// usually unauthenticated: turn it on only where the endpoint is not
	// exposed. Default: false (each check reads ok or FAIL).
	Details bool
	// CacheFor is how long one round of checks answers later requests;
	// requests that arrive during a round wait for it and share its result,
	// so a flood of requests costs one round of probes. Default:
	// DefaultReadyCache (1 s); negative: every request runs a round (still
	// shared with the requests that arrive during it).
	CacheFor time.Duration
}

// Readyz is NewReadyz with the default options: no error details, results
// cached for DefaultReadyCache.
func Readyz(checks ...Check) http.Handler { return NewReadyz(ReadyzOptions{}, checks...) }

// NewReadyz returns a handler that runs every check concurrently, each
// within its timeout (a probe must honour its context), and answers 200 when
// all pass and 503 when any fails. The body lists each check with "ok" or
// "FAIL" (and, with opts.Details, its error), as plain text, or as a
// [ReadyResult] when the request accepts application/json. With no checks it
// always answers 200. A round of checks serves every request that arrives
// while it runs and, for opts.CacheFor, those that follow; a request that
// gives up waiting does not cut the round short. The handler is safe for
// concurrent use.
func NewReadyz(opts ReadyzOptions, checks ...Check) http.Handler {
	if opts.CacheFor == 0 {
		opts.CacheFor = DefaultReadyCache
	}
	return &readyz{opts: opts, checks: checks}
}

// readyz is the handler of NewReadyz.
type readyz struct {
	opts   ReadyzOptions
	checks []Check

	mu    sync.Mutex
	last  ReadyResult
	at    time.Time     // when last was taken; zero before the first round
	round chan struct{} // closed when the round in progress ends; nil when none runs
}

// result returns a fresh enough result, running a round or waiting for the
// one in progress. ok is false when ctx ended first.
func (h *readyz) result(ctx context.Context) (res ReadyResult, ok bool) {
	h.mu.Lock()
	if !h.at.IsZero() && time.Since(h.at) < h.opts.CacheFor {
		defer h.mu.Unlock()
		return h.last, true
	}
	round := h.round
	if round == nil {
		round = make(chan struct{})
		h.round = round
		// The round outlives the request that started it, bounded by the checks' timeouts.
		go func() {
			res := runChecks(context.WithoutCancel(ctx), h.checks)
			h.mu.Lock()
			h.last, h.at, h.round = res, time.Now(), nil
			h.mu.Unlock()
			close(round)
		}()
	}
	h.mu.Unlock()
	select {
	case <-round:
	case <-ctx.Done():
		return ReadyResult{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last, true
}

func (h *readyz) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	res, ok := h.result(r.Context())
	if !ok {
		return // the client left
	}
	if !h.opts.Details {
		res.Checks = slices.Clone(res.Checks)
		for i := range res.Checks {
			res.Checks[i].Error = ""
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	status := http.StatusOK
	if !res.Ready {
		status = http.StatusServiceUnavailable
	}
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(res)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	if res.Ready {
		fmt.Fprintln(w, "ready")
	} else {
		fmt.Fprintln(w, "not ready")
	}
	for _, c := range res.Checks {
		switch {
		case c.OK:
			fmt.Fprintf(w, "ok   %s\n", c.Name)
		case c.Error == "":
			fmt.Fprintf(w, "FAIL %s\n", c.Name)
		default:
			fmt.Fprintf(w, "FAIL %s: %s\n", c.Name, c.Error)
		}
	}
}

// runChecks runs checks concurrently and reports them in their given order.
func runChecks(ctx context.Context, checks []Check) ReadyResult {
	res := ReadyResult{Ready: true, Checks: make([]CheckResult, len(checks))}
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			err := probe(ctx, c)
			res.Checks[i] = CheckResult{Name: c.Name, OK: err == nil}
			if err != nil {
				res.Checks[i].Error = err.Error()
			}
		})
	}
	wg.Wait()
	for _, c := range res.Checks {
		res.Ready = res.Ready && c.OK
	}
	return res
}

// probe runs c within its timeout, and says so when the timeout cut it short.
func probe(ctx context.Context, c Check) error {
	if c.Probe == nil {
		return errors.New("check has no probe")
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultCheckTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := c.Probe(ctx)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %v: %w", timeout, err)
	}
	return err
}
