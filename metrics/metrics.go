package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/outboxkit/outbox"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the options.
const (
	// DefaultRelayName is the relay label's value when WithRelayName is not given.
	DefaultRelayName = "default"
	// DefaultMaxDestinations is how many distinct destination label values a
	// Metrics keeps before it counts the rest under OtherDestination.
	DefaultMaxDestinations = 50
	// OtherDestination is the destination label value of every destination
	// past the first MaxDestinations.
	OtherDestination = "other"
)

// Bucket layouts of the histograms. They are chosen for the relay's defaults
// (batch 100, publish timeout 3 s, backoff from 1 s up to 5 min).
var (
	batchSizeBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}
	durationBuckets  = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	latencyBuckets   = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600}
	attemptBuckets   = []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50}
)

// Metrics exports a relay's activity to Prometheus. It implements the relay's
// hooks ([outbox.HookBatch], [outbox.HookMessage], [outbox.HookDestination]),
// so it is passed to the relay with outbox.WithHooks(m); [Metrics.PollStats]
// adds the table's backlog, [Metrics.SetUp] the relay's liveness and
// [Metrics.WrapPublisher] the broker's response time, and
// [Metrics.StartArchive] with its On methods a scheduled archive, and
// [Metrics.WatchSlot] a CDC replication slot.
//
// Every series carries a relay label (see [WithRelayName]), so several relays
// can register their own Metrics with one registry. The only other labels are
// result (one of the outbox.Result values, or ok and error for archive runs),
// destination (bounded, see [WithMaxDestinations]), the archive's mode
// (move or delete), and a watched slot's name and wal_status; no label ever
// holds a message or aggregate id.
//
// One Metrics may serve several relay loops that share a table and a name
// (the daemon's --relays). A Metrics is safe for concurrent use. Its hook
// methods are cheap: a map lookup under a mutex and a few atomic adds.
type Metrics struct {
	cfg config

	mu        sync.Mutex
	dests     map[string]struct{}                 // destination label values given out
	published map[publishedKey]prometheus.Counter // series of publishedVec, once used
	running   int                                 // relay loops between SetUp(true) and SetUp(false)

	up              prometheus.Gauge
	destUp          prometheus.Gauge
	destOutages     prometheus.Counter
	publishedVec    *prometheus.CounterVec
	attempt         prometheus.Histogram
	latency         prometheus.Histogram
	batchSize       prometheus.Histogram
	batchDuration   prometheus.Histogram
	batchErrors     prometheus.Counter
	fenced          prometheus.Counter
	gone            prometheus.Counter
	expired         prometheus.Counter
	publishDuration prometheus.Histogram
	stats           *statsCollector
	slot            *slotCollector
	archive         *archiveMetrics

	all []prometheus.Collector
}

var (
	_ outbox.HookBatch       = (*Metrics)(nil)
	_ outbox.HookMessage     = (*Metrics)(nil)
	_ outbox.HookDestination = (*Metrics)(nil)
	_ prometheus.Collector   = (*Metrics)(nil)
)

type config struct {
	relay           string
	destination     func(*outbox.Message) string
	maxDestinations int
	logger          *slog.Logger
}

func defaultConfig() config {
	return config{
		relay:           DefaultRelayName,
		destination:     (*outbox.Message).Destination,
		maxDestinations: DefaultMaxDestinations,
		logger:          slog.New(slog.DiscardHandler),
	}
}

func (c *config) validate() error {
	var errs []error
	if c.relay == "" {
		errs = append(errs, errors.New("WithRelayName: name is empty"))
	}
	if c.destination == nil {
		errs = append(errs, errors.New("WithDestinationLabel: function is nil"))
	}
	if c.maxDestinations < 1 {
		errs = append(errs, fmt.Errorf("WithMaxDestinations: %d is less than 1", c.maxDestinations))
	}
	if c.logger == nil {
		errs = append(errs, errors.New("WithLogger: logger is nil"))
	}
	return errors.Join(errs...)
}

// Option configures a [Metrics].
type Option func(*config)

// WithRelayName sets the relay label of every series; give each relay of a
// process its own (the daemon uses the relay's name). Default:
// DefaultRelayName ("default").
func WithRelayName(name string) Option { return func(c *config) { c.relay = name } }

// WithDestinationLabel sets the function that turns a message into its
// destination label. Return a coarse value (the event type, a topic prefix) or
// a constant "" to drop the detail. Default: Message.Destination (the Topic,
// else the EventType), capped by WithMaxDestinations.
func WithDestinationLabel(fn func(*outbox.Message) string) Option {
	return func(c *config) { c.destination = fn }
}

// WithMaxDestinations caps how many distinct destination label values are
// kept: the first n seen keep their own series and every later one is counted
// under OtherDestination ("other"), so a topic per aggregate cannot explode
// the number of series. Default: DefaultMaxDestinations (50).
func WithMaxDestinations(n int) Option { return func(c *config) { c.maxDestinations = n } }

// WithLogger sets the logger of PollStats, which logs each failed Stats query
// at Warn. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// NewMetrics builds the relay's metrics and registers them with reg (never
// with the global registry unless the caller passes it). It returns an error
// naming every invalid option, or the registry's error when the same relay
// name is registered twice. It panics if reg is nil, a programmer error.
func NewMetrics(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	if reg == nil {
		panic("metrics: NewMetrics with a nil Registerer")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("metrics: new metrics: %w", err)
	}
	labels := prometheus.Labels{"relay": cfg.relay}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
	}
	m := &Metrics{
		cfg:       cfg,
		dests:     make(map[string]struct{}),
		published: make(map[publishedKey]prometheus.Counter),
		up: gauge("outbox_relay_up",
			"1 while the relay loop runs, 0 once it stopped."),
		destUp: gauge("outbox_relay_destination_up",
			"0 while the relay finds the broker down and pauses to probe it, else 1."),
		destOutages: counter("outbox_relay_destination_outages_total",
			"Times the relay found the broker down and paused."),
		publishedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "outbox_relay_published_total",
			Help:        "Messages the relay tried to publish, by result (sent, retry, dead, unavailable; held_back: given back unpublished behind a failed message of its aggregate) and destination.",
			ConstLabels: labels,
		}, []string{"result", "destination"}),
		attempt: histogram("outbox_relay_publish_attempt",
			"Attempt number of each publish attempt that counted (1 = first try); retries land in the buckets above 1.",
			attemptBuckets),
		latency: histogram("outbox_relay_delivery_latency_seconds",
			"Time from the message's commit (created_at) to the broker's confirmation, for sent messages.",
			latencyBuckets),
		batchSize: histogram("outbox_relay_batch_size",
			"Rows claimed by one claim-publish-acknowledge cycle.", batchSizeBuckets),
		batchDuration: histogram("outbox_relay_batch_duration_seconds",
			"Duration of one claim-publish-acknowledge cycle, from the claim to the acknowledgement.",
			durationBuckets),
		batchErrors: counter("outbox_relay_batch_errors_total",
			"Cycles cut short by a store error (claim, ack, reschedule or kill failed)."),
		fenced: counter("outbox_relay_fenced_total",
			"Messages published but acknowledged by nobody because another relay took their rows over (lease expired)."),
		gone: counter("outbox_relay_gone_total",
			"Messages published whose rows were deleted before the relay acknowledged them (by an operator, or with delete_sent by a relay that took them over)."),
		expired: counter("outbox_relay_expired_total",
			"Messages marked dead unpublished because their ExpiresAt had passed when the relay claimed them (also counted as dead in outbox_relay_published_total)."),
		publishDuration: histogram("outbox_relay_publish_duration_seconds",
			"Duration of one Publish call to the broker (one batch), measured by WrapPublisher.",
			durationBuckets),
		stats:   newStatsCollector(labels, cfg.logger.With("component", "metrics", "relay", cfg.relay)),
		slot:    newSlotCollector(labels, cfg.logger.With("component", "metrics", "relay", cfg.relay)),
		archive: newArchiveMetrics(labels),
	}
	m.destUp.Set(1)
	m.all = []prometheus.Collector{m.up, m.destUp, m.destOutages, m.publishedVec, m.attempt, m.latency,
		m.batchSize, m.batchDuration, m.batchErrors, m.fenced, m.gone, m.expired, m.publishDuration, m.stats, m.slot}
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("metrics: register relay %q: %w", cfg.relay, err)
	}
	return m, nil
}

// Describe sends the descriptors of every metric; part of prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all {
		c.Describe(ch)
	}
	m.archive.describe(ch)
}

// Collect sends the current value of every metric; part of prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all {
		c.Collect(ch)
	}
	m.archive.collect(ch)
}

// SetUp maintains outbox_relay_up: call SetUp(true) before each Relay.Run
// that reports to m and SetUp(false) once it returned. The gauge reads 1
// while at least one of them runs, so several relay loops of one table may
// share a Metrics; it reads 0 before the first call.
func (m *Metrics) SetUp(up bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case up:
		m.running++
	case m.running > 0:
		m.running--
	}
	m.up.Set(boolFloat(m.running > 0))
}

// OnBatch records a claim-publish-acknowledge cycle; part of outbox.HookBatch.
// A claim cut short because the relay is stopping (context.Canceled) is not
// counted as a store error.
func (m *Metrics) OnBatch(ev outbox.BatchEvent) {
	if ev.Err != nil && !errors.Is(ev.Err, context.Canceled) {
		m.batchErrors.Inc()
	}
	if ev.Claimed > 0 {
		m.batchSize.Observe(float64(ev.Claimed))
		m.batchDuration.Observe(ev.Duration.Seconds())
	}
	if ev.Fenced > 0 {
		m.fenced.Add(float64(ev.Fenced))
	}
	if ev.Gone > 0 {
		m.gone.Add(float64(ev.Gone))
	}
}

// OnMessage records one message's result; part of outbox.HookMessage. A
// dead message that had expired (outbox.ErrExpired) is also counted by
// outbox_relay_expired_total. A
// message whose destination was unavailable, or that was held back, had its
// attempt refunded, so its attempt number is not observed.
func (m *Metrics) OnMessage(ev outbox.MessageEvent) {
	msg := ev.Message
	if msg == nil {
		msg = &outbox.Message{}
	}
	m.publishedCounter(ev.Result, msg).Inc()
	if ev.Result == outbox.ResultDead && errors.Is(ev.Err, outbox.ErrExpired) {
		m.expired.Inc()
	}
	if ev.Result != outbox.ResultUnavailable && ev.Result != outbox.ResultHeldBack && msg.Attempt > 0 {
		m.attempt.Observe(float64(msg.Attempt))
	}
	if ev.Result == outbox.ResultSent && !msg.CreatedAt.IsZero() {
		// created_at comes from the database's clock; a skew with ours must not go negative.
		m.latency.Observe(max(ev.Latency.Seconds(), 0))
	}
}

// OnDestination records the broker going down or coming back; part of
// outbox.HookDestination.
func (m *Metrics) OnDestination(up bool, _ error) {
	if !up {
		m.destOutages.Inc()
	}
	m.destUp.Set(boolFloat(up))
}

// publishedKey names a series of outbox_relay_published_total.
type publishedKey struct {
	result outbox.Result
	dest   string
}

// publishedCounter returns the outbox_relay_published_total series of
// result and msg's bounded destination label. It keeps each series it used,
// so a message costs one map lookup under m.mu rather than the vector's own
// hashing, checks and lock as well.
func (m *Metrics) publishedCounter(result outbox.Result, msg *outbox.Message) prometheus.Counter {
	d := m.cfg.destination(msg)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.dests[d]; !ok {
		if len(m.dests) < m.cfg.maxDestinations {
			m.dests[d] = struct{}{}
		} else {
			d = OtherDestination
		}
	}
	k := publishedKey{result: result, dest: d}
	c, ok := m.published[k]
	if !ok {
		c = m.publishedVec.WithLabelValues(string(result), d)
		m.published[k] = c
	}
	return c
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
