package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultStatsInterval is how often PollStats asks the store for its backlog
// when given an interval of 0.
const DefaultStatsInterval = 15 * time.Second

// minStatsTimeout is the least time a Stats call is given, however short the
// interval: a busy database may need a moment, and a timed-out query tells
// nothing.
const minStatsTimeout = 5 * time.Second

// statsTimeout bounds one Stats call made every interval.
func statsTimeout(interval time.Duration) time.Duration { return max(interval, minStatsTimeout) }

// staleAfter is how long a stats snapshot taken every interval is exported:
// through one failed poll (which may take its whole timeout), so that an
// alert's `for` clock does not restart on a hiccup, but not once the store
// stopped answering.
func staleAfter(interval time.Duration) time.Duration { return 2*interval + statsTimeout(interval) }

// StatsSource reports an outbox table's backlog. Every outbox.Store is one.
type StatsSource interface {
	Stats(ctx context.Context) (*outbox.Stats, error)
}

// PollStats asks src for the table's backlog now and every interval after
// (DefaultStatsInterval when interval is 0) until ctx is done, then returns
// nil. Each call is bounded by the interval, or 5 s when that is longer. The
// results are exported as outbox_pending_messages,
// outbox_oldest_pending_age_seconds, outbox_dead_messages,
// outbox_other_status_messages and outbox_sent_last_minute_messages, with
// outbox_stats_up (1 when the last call succeeded),
// outbox_stats_duration_seconds and outbox_stats_errors_total beside them;
// each failure is logged at Warn (see [WithLogger]). The last
// good values outlive one failed call, so an alert's `for` clock survives a
// hiccup, and vanish once the store stops answering (after two intervals
// plus the call's timeout), so a dashboard never shows a stale backlog as
// current.
//
// Why a poller rather than a collector that queries on scrape: the database
// sees one query per interval however many Prometheus servers scrape (and
// however often), and a slow Stats query on a large table never makes a
// scrape time out, which would read as the relay being down.
//
// Run at most one PollStats per Metrics (one per table is enough, however
// many relay loops read it). It returns an error at once for a negative
// interval, a nil src or a second concurrent call.
func (m *Metrics) PollStats(ctx context.Context, src StatsSource, interval time.Duration) error {
	if interval < 0 {
		return fmt.Errorf("metrics: poll stats: interval %v is negative", interval)
	}
	if interval == 0 {
		interval = DefaultStatsInterval
	}
	if src == nil {
		return errors.New("metrics: poll stats: source is nil")
	}
	s := m.stats
	if !s.polling.CompareAndSwap(false, true) {
		return errors.New("metrics: poll stats: already polling")
	}
	defer s.polling.Store(false)

	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.poll(ctx, src, interval)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// statsCollector exports the last snapshot PollStats took.
type statsCollector struct {
	pending, oldest, dead, other, sentMinute *prometheus.Desc
	up, duration                             *prometheus.Desc
	errors                                   prometheus.Counter
	log                                      *slog.Logger

	polling atomic.Bool

	mu       sync.Mutex
	started  bool          // a poll ran at least once
	ok       bool          // the last poll succeeded
	last     *outbox.Stats // the last successful snapshot
	at       time.Time     // when last was taken
	took     time.Duration // how long the last poll took
	interval time.Duration
}

func newStatsCollector(labels prometheus.Labels, log *slog.Logger) *statsCollector {
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, labels) }
	return &statsCollector{
		log: log,
		pending: desc("outbox_pending_messages",
			"Rows waiting to be published (status 0), including leased ones and ones waiting out a backoff."),
		oldest: desc("outbox_oldest_pending_age_seconds",
			"Age of the oldest pending row; 0 when none is pending."),
		dead: desc("outbox_dead_messages",
			"Rows marked dead (status 2), waiting for an operator to retry or discard them."),
		other: desc("outbox_other_status_messages",
			"Rows whose status is NULL or not 0, 1 or 2 (written or changed by another program); the relay never touches them."),
		sentMinute: desc("outbox_sent_last_minute_messages",
			"Rows acknowledged as sent in the last minute (0 when the relay deletes sent rows)."),
		up: desc("outbox_stats_up",
			"1 when the last backlog query (Store.Stats) succeeded, else 0."),
		duration: desc("outbox_stats_duration_seconds",
			"How long the last backlog query (Store.Stats) took."),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "outbox_stats_errors_total",
			Help:        "Backlog queries (Store.Stats) that failed or timed out.",
			ConstLabels: labels,
		}),
	}
}

func (s *statsCollector) poll(ctx context.Context, src StatsSource, interval time.Duration) {
	start := time.Now()
	qctx, cancel := context.WithTimeout(ctx, statsTimeout(interval))
	st, err := src.Stats(qctx)
	cancel()
	took := time.Since(start)
	if err != nil && ctx.Err() != nil {
		return // shutting down: not the store's fault
	}
	if err == nil && st == nil {
		err = errors.New("store returned no stats")
	}
	if err != nil {
		s.errors.Inc()
		s.log.LogAttrs(ctx, slog.LevelWarn, "stats query failed", slog.String("error", err.Error()),
			slog.Duration("duration", took))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started, s.took, s.interval = true, took, interval
	s.ok = err == nil
	if s.ok {
		s.last, s.at = st, time.Now()
	}
}

func (s *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.pending, s.oldest, s.dead, s.other, s.sentMinute, s.up, s.duration} {
		ch <- d
	}
	s.errors.Describe(ch)
}

func (s *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s.errors.Collect(ch)
	s.mu.Lock()
	started, ok, last, at, took, interval := s.started, s.ok, s.last, s.at, s.took, s.interval
	s.mu.Unlock()
	if !started {
		return
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	gauge(s.up, boolFloat(ok))
	gauge(s.duration, took.Seconds())
	if last == nil || time.Since(at) > staleAfter(interval) {
		return
	}
	gauge(s.pending, float64(last.Pending))
	gauge(s.oldest, last.OldestPending.Seconds())
	gauge(s.dead, float64(last.Dead))
	gauge(s.other, float64(last.OtherStatus))
	gauge(s.sentMinute, float64(last.SentLastMinute))
}
