package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/redact"
	"github.com/outboxkit/outbox/internal/termsafe"
	"github.com/outboxkit/outbox/metrics"
	"github.com/outboxkit/outbox/store/pgcdc"
	"github.com/outboxkit/outbox/tracing"
)

// ErrRunTwice is returned by [Daemon.Run] when it is called a second time.
var ErrRunTwice = errors.New("daemon: Run called twice")

// Daemon is the relay process: one database pool, the brokers, the routing
// between them, N relay loops, and an optional HTTP server with metrics and
// health checks. It is built by [New] and run once by [Daemon.Run]. Its
// methods are safe for concurrent use.
type Daemon struct {
	cfg     *config.Config
	red     *redact.Redactor // the config's secrets
	log     *slog.Logger
	opts    options
	ran     atomic.Bool
	ready   chan struct{}
	httpURL atomic.Pointer[string]
}

// Option configures a [Daemon].
type Option func(*options)

type options struct {
	hooks    []any
	handlers map[string]http.Handler
	stdout   io.Writer
}

// WithRelayHooks adds observers to every relay loop (outbox.WithHooks),
// besides the daemon's own metrics. Default: none.
func WithRelayHooks(hooks ...any) Option {
	return func(o *options) { o.hooks = append(o.hooks, hooks...) }
}

// WithHandler mounts h on the HTTP server at pattern (an http.ServeMux
// pattern such as "GET /debug/vars"), beside /metrics, /healthz and /readyz.
// It has an effect only when the config names an HTTP address. Default: none.
func WithHandler(pattern string, h http.Handler) Option {
	return func(o *options) {
		if o.handlers == nil {
			o.handlers = make(map[string]http.Handler)
		}
		o.handlers[pattern] = h
	}
}

// WithStdout sets where the stdout trace exporter writes, its JSON escaped
// by termsafe so that no span attribute reaches a terminal as a command.
// Default: os.Stdout.
func WithStdout(w io.Writer) Option { return func(o *options) { o.stdout = w } }

// New checks cfg (see [config.Config.Validate]) and its routes (patterns and
// topic templates, as publisher/router checks them) and returns a Daemon
// that will run it, logging to logger (nil discards). New does no I/O:
// [Daemon.Run] connects. The Daemon keeps cfg; don't change it afterwards.
func New(cfg *config.Config, logger *slog.Logger, opts ...Option) (*Daemon, error) {
	if cfg == nil {
		return nil, errors.New("daemon: nil config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkRoutes(cfg); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	red := redactorOf(configSecrets(cfg)...)
	d := &Daemon{cfg: cfg, red: red, log: redactLogs(logger, red), ready: make(chan struct{})}
	for _, o := range opts {
		o(&d.opts)
	}
	return d, nil
}

// Ready is closed once Run has connected to the database and the brokers
// and started the relays (and the HTTP server).
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// HTTPURL returns the base URL of the HTTP server ("http://127.0.0.1:9090")
// once Ready is closed, or "" when there is none.
func (d *Daemon) HTTPURL() string {
	if u := d.httpURL.Load(); u != nil {
		return *u
	}
	return ""
}

// Run opens the database (a pool of its own, bounded by
// config.Config.PoolSize) and the brokers, checks that each answers, and runs
// the relay loops until ctx is cancelled. Then each relay finishes the batch
// in flight (publishing it within the publish timeout and acknowledging it)
// and claims nothing new, the HTTP server stops, and Run flushes the traces,
// closes what it opened and returns nil. The relays are done at most the
// publish timeout plus outbox.StopGrace after the cancel, whatever the
// database does, and the database's connections get one more second to
// close before their sockets are closed. It returns an error, closing what it
// opened, when the database or a broker cannot be reached at the start, when
// the table is one the relay cannot work on (an *outbox.TableError naming
// every problem and its fix, see outbox.TableChecker), or when the HTTP
// server cannot listen. Run may be called once.
//
// With an HTTP address, the relays report to Prometheus metrics (package
// metrics: one relay label, config.Config.Name, for all loops), the
// publisher is timed, and the table's backlog is read every StatsInterval;
// on PostgreSQL the CDC replication slot is read at each scrape
// (metrics.Metrics.WatchSlot).
// With a trace exporter, each publish gets a span (package tracing). With
// archive_every (on by default, off with delete_sent), old sent rows are
// archived on a schedule beside the relays; an archive error is logged,
// counted and retried at the next period, and never stops Run.
//
// No error Run returns or logs holds a secret of the config: see redact.go.
func (d *Daemon) Run(ctx context.Context) error {
	if !d.ran.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	return d.scrubAll(d.run(ctx)) // the caller reports it
}

func (d *Daemon) run(ctx context.Context) error {
	cfg := d.cfg
	d.warnPlaintextCredentials()
	tp, flushTraces, err := d.tracing(ctx)
	if err != nil {
		return err
	}
	defer flushTraces()

	db, err := OpenDB(ctx, cfg.DB, DBParams{Table: cfg.Table, MaxConns: cfg.PoolSize(), Notify: cfg.Notify,
		NotifyTrigger: cfg.NotifyTrigger, BatchLease: cfg.BatchLease, AsyncCommit: cfg.AsyncCommit, HeldClaims: cfg.HeldClaims,
		Columns: cfg.Columns})
	if err != nil {
		return err
	}
	defer db.Close()
	if len(cfg.Columns) == 0 || cfg.Source != config.SourceCDC { // with cdc, a mapped table is the source's to check (relays)
		if err := checkTable(ctx, db.Store); err != nil {
			return d.scrubAll(err)
		}
		d.warnMissingIndexes(ctx, db.Store)
	}

	brokers, err := openBrokers(ctx, cfg.EffectiveBrokers(), brokerParams{publishTimeout: cfg.PublishTimeout, log: d.log, red: d.red,
		raw: rawBrokers(cfg)})
	if err != nil {
		return err
	}
	defer closeBrokers(brokers)
	d.warnShortDuplicateWindow()

	pub, err := d.publisher(brokers)
	if err != nil {
		return err
	}
	if cfg.TraceExporter != config.DefaultTraceExporter {
		var topts []tracing.Option
		if len(brokers) == 1 {
			topts = append(topts, tracing.WithSystem(brokers[0].scheme))
		}
		pub = tracing.WrapPublisher(pub, tp, topts...)
	}

	tel := &telemetry{claims: &claimHealth{}, hooks: slices.Clone(d.opts.hooks)}
	started := false
	defer func() {
		if !started && tel.ln != nil {
			tel.ln.Close()
		}
	}()
	if cfg.HTTP != "" {
		if pub, err = d.serveTelemetry(tel, pub, db); err != nil {
			return err
		}
	}
	src, relays, err := d.relays(ctx, db, pub, tel)
	if err != nil {
		return err
	}
	arch, err := d.archiver(db, tel.m)
	if err != nil {
		return err
	}
	d.log.Info("daemon started", d.startedAttrs(db, brokers, tel.ln)...)
	started = true

	return d.serve(ctx, parts{src: src, relays: relays, arch: arch, tel: tel, db: db, brokers: brokers})
}

// parts is what the daemon runs once it started.
type parts struct {
	src     *pgcdc.Source // nil unless source: cdc
	relays  []*outbox.Relay
	arch    *archiver // nil without archiving
	tel     *telemetry
	db      *DB
	brokers []openBroker
}

// serve runs the relays, the CDC source, the archiver and the HTTP server
// until ctx ends or one of them fails.
func (d *Daemon) serve(ctx context.Context, r parts) error {
	g, gctx := errgroup.WithContext(ctx)
	if r.src != nil {
		g.Go(func() error { return r.src.Run(gctx) })
	}
	m := r.tel.m
	for _, relay := range r.relays {
		g.Go(func() error {
			if m != nil {
				m.SetUp(true)
				defer m.SetUp(false)
			}
			return relay.Run(gctx)
		})
	}
	if r.arch != nil {
		g.Go(func() error { return r.arch.run(gctx) })
	}
	if r.tel.ln != nil {
		h := d.handler(r.tel.reg, r.db, r.brokers, r.tel.claims)
		var stats outbox.Store = r.db.Store
		if d.cfg.LogOnly() { // the polling store cannot read a log-only table
			stats = r.src
		}
		g.Go(func() error { return m.PollStats(gctx, stats, d.cfg.StatsInterval) })
		g.Go(func() error { return serveHTTP(gctx, r.tel.ln, h) })
	}
	close(d.ready)
	if err := g.Wait(); err != nil {
		return err
	}
	d.log.Info("daemon stopped")
	return nil
}

// tracing sets up the configured trace exporter; flush sends what it holds
// (within 5 s) and shuts it down.
func (d *Daemon) tracing(ctx context.Context) (tp trace.TracerProvider, flush func(), err error) {
	tp, shutdown, err := tracing.Setup(ctx, tracing.Config{Exporter: d.cfg.TraceExporter,
		Endpoint: d.cfg.TraceEndpoint, ServiceName: "outbox-relay", Stdout: termsafe.NewWriter(d.opts.stdout)})
	if err != nil {
		return nil, nil, err
	}
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			d.log.Warn("flush traces failed", "error", err.Error())
		}
	}, nil
}

// telemetry is what the daemon's HTTP server exposes: the metrics (nil
// without an HTTP address), their registry, the listener, and the claim
// health behind /readyz; hooks are the relays' hooks, the metrics included.
type telemetry struct {
	m      *metrics.Metrics
	reg    *prometheus.Registry
	ln     net.Listener
	claims *claimHealth
	hooks  []any
}

// serveTelemetry creates the metrics, wraps pub with them, and opens the
// HTTP listener; it returns the wrapped publisher.
func (d *Daemon) serveTelemetry(tel *telemetry, pub outbox.Publisher, db *DB) (outbox.Publisher, error) {
	tel.reg = metrics.NewRegistry()
	m, err := metrics.NewMetrics(tel.reg, metrics.WithRelayName(d.cfg.Name), metrics.WithLogger(d.log))
	if err != nil {
		return nil, err
	}
	tel.m = m
	tel.hooks = append(tel.hooks, m, tel.claims)
	if err := watchSlot(m, d.cfg, db); err != nil {
		return nil, err
	}
	if tel.ln, err = net.Listen("tcp", d.cfg.HTTP); err != nil {
		return nil, fmt.Errorf("http server: %w", err)
	}
	u := "http://" + tel.ln.Addr().String()
	d.httpURL.Store(&u)
	return m.WrapPublisher(pub), nil
}

// relays builds the configured relays over the table, or over the CDC
// source (returned too, to be run beside them) with source: cdc; with a
// columns: mapping it checks the mapped table first (checkMapped).
func (d *Daemon) relays(ctx context.Context, db *DB, pub outbox.Publisher, tel *telemetry) (*pgcdc.Source, []*outbox.Relay, error) {
	var store outbox.Store = db.Store
	src, err := d.cdcSource(db, tel.reg)
	if err != nil {
		return nil, nil, err
	}
	if src != nil {
		store = src
		if len(d.cfg.Columns) > 0 {
			if err := d.checkMapped(ctx, db, src); err != nil {
				return nil, nil, err
			}
		}
	}
	relays := make([]*outbox.Relay, d.cfg.Relays)
	for i := range relays {
		if relays[i], err = outbox.NewRelay(store, pub, d.relayOptions(i, tel.hooks)...); err != nil {
			return nil, nil, err
		}
	}
	return src, relays, nil
}

// startedAttrs are the attributes of the "daemon started" line.
func (d *Daemon) startedAttrs(db *DB, brokers []openBroker, ln net.Listener) []any {
	cfg := d.cfg
	attrs := []any{slog.String("name", cfg.Name), slog.Int("relays", cfg.Relays), slog.String("table", cfg.Table),
		slog.String("db_scheme", db.Scheme), slog.Int("db_max_conns", cfg.PoolSize()), slog.String("source", cfg.Source)}
	names := make([]string, len(brokers))
	for i, b := range brokers {
		names[i] = b.name + "=" + b.scheme
	}
	attrs = append(attrs, slog.String("brokers", strings.Join(names, ",")))
	if ln != nil {
		attrs = append(attrs, slog.String("http", ln.Addr().String()))
	}
	return attrs
}

// checkTable checks, within the bound of a first contact, that the relay
// can work on the table, so that a misspelt table, a missing column or a
// column of the wrong type stops the start with what to fix, instead of
// failing every claim after "daemon started".
func checkTable(ctx context.Context, s outbox.TableChecker) error {
	cctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := s.CheckTable(cctx); err != nil {
		return fmt.Errorf("check table: %w", err)
	}
	return nil
}

// warnMissingIndexes logs, once at start, each index the relay's claims
// would use that the table lacks, with the statement that creates it. The
// relay works without them, only slower on a table that keeps many rows,
// so a missing index is a warning and the start goes on; so does a failure
// to look.
func (d *Daemon) warnMissingIndexes(ctx context.Context, s outbox.Store) {
	ic, ok := s.(outbox.IndexChecker)
	if !ok {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	missing, err := ic.MissingIndexes(cctx)
	if err != nil {
		d.log.Warn("could not look for missing indexes", "table", d.cfg.Table, "error", d.scrubAll(err).Error())
		return
	}
	for _, m := range missing {
		d.log.Warn("table lacks an index the relay would use; claims work without it, more slowly as the table grows",
			"table", d.cfg.Table, "problem", m.Problem, "fix", m.Fix)
	}
}

// archiver returns the scheduled archive of the config (nil when it is
// off) and logs what it will do, or why it is off.
func (d *Daemon) archiver(db *DB, m *metrics.Metrics) (*archiver, error) {
	c := d.cfg
	if !c.ArchiveScheduled() {
		switch {
		case c.ArchiveEvery > 0 && c.LogOnly():
			d.log.Info("archive not scheduled: a log-only table (columns: without state columns) is never written to")
		case c.ArchiveEvery > 0: // off because of delete_sent: say so, since archive_every is on by default
			d.log.Info("archive not scheduled: delete_sent leaves no sent rows to archive")
		}
		return nil, nil
	}
	admin, ok := db.Store.(outbox.Admin)
	if !ok {
		return nil, errNoAdmin
	}
	a := &archiver{
		admin: admin,
		p:     outbox.ArchiveParams{OlderThan: c.ArchiveOlderThan, Batch: c.ArchiveBatch, Delete: c.ArchiveDelete},
		every: c.ArchiveEvery,
		first: min(c.ArchiveEvery, archiveFirstDelay),
		log:   d.log.With("component", "archive"),
		m:     m,
		scrub: d.scrubAll,
	}
	mode := metrics.ArchiveModeDelete
	if !c.ArchiveDelete {
		mode = metrics.ArchiveModeMove
		if t, ok := admin.(interface{ ArchiveTable() string }); ok {
			a.dest = t.ArchiveTable()
		}
	}
	attrs := []any{slog.String("mode", mode), slog.Duration("every", a.every), slog.Duration("older_than", a.p.OlderThan),
		slog.Int("batch", a.p.Batch), slog.Duration("first_in", a.first)}
	if a.dest != "" {
		attrs = append(attrs, slog.String("archive_table", a.dest))
	}
	d.log.Info("archive scheduled", attrs...)
	if m != nil {
		m.StartArchive(a.every, a.p.Delete) // before Ready, so that the first scrape has the series
	}
	return a, nil
}

// relayOptions turns the config into the options of relay loop i, which
// reports to hooks.
func (d *Daemon) relayOptions(i int, hooks []any) []outbox.RelayOption {
	c := d.cfg
	minBatch, maxBatch := c.BatchSizes()
	opts := []outbox.RelayOption{
		outbox.WithBatchSizeRange(minBatch, maxBatch),
		outbox.WithPollInterval(c.PollInterval),
		outbox.WithMinPollInterval(c.MinPollInterval),
		outbox.WithMaxInFlightRange(c.MinInFlight, c.MaxInFlight),
		outbox.WithMaxAttempts(c.MaxAttempts),
		outbox.WithBackoff(c.BackoffBase, c.BackoffCap),
		outbox.WithPublishTimeout(c.PublishTimeout),
		outbox.WithStoreTimeout(c.StoreTimeout),
		outbox.WithLease(c.Lease),
		outbox.WithProbeInterval(c.ProbeInterval, c.MaxProbeInterval),
		outbox.WithDeleteSent(c.DeleteSent),
		outbox.WithOrdering(c.Ordering, c.RelayDeadPolicy()),
		outbox.WithRelayTTL(c.RelayTTL),
		outbox.WithMaxPayloadSize(c.MaxPayload),
		outbox.WithLogger(d.log),
		outbox.WithName(fmt.Sprintf("%s-%d", c.Name, i+1)),
	}
	if len(hooks) > 0 {
		opts = append(opts, outbox.WithHooks(hooks...))
	}
	return opts
}

// warnShortDuplicateWindow logs when a NATS stream's duplicate window cannot
// cover a re-send: a relay that crashed after publishing sends again after
// the lease, and a retry can come as late as the backoff cap.
func (d *Daemon) warnShortDuplicateWindow() {
	need := d.cfg.Lease + d.cfg.BackoffCap
	for _, b := range d.cfg.EffectiveBrokers() {
		if b.URL.Scheme() == "nats" && b.EffectiveDuplicateWindow() < need {
			d.log.Warn("nats duplicate window is shorter than lease plus backoff cap: the stream may keep re-sent copies",
				"broker", b.Name, "duplicate_window", b.EffectiveDuplicateWindow(), "lease_plus_backoff_cap", need)
		}
	}
}

// scrubAll hides every secret of the config in err's message.
func (d *Daemon) scrubAll(err error) error { return d.red.Error(err) }
