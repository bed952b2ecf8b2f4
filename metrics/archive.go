package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the mode label of outbox_archived_total and of the result label
// of outbox_archive_runs_total.
const (
	// ArchiveModeMove counts rows moved into the archive table.
	ArchiveModeMove = "move"
	// ArchiveModeDelete counts rows deleted (archive_delete).
	ArchiveModeDelete = "delete"
	// ArchiveResultOK counts runs that ended without an error.
	ArchiveResultOK = "ok"
	// ArchiveResultError counts runs an error cut short.
	ArchiveResultError = "error"
)

// archiveMetrics are the series of a scheduled archive (the daemon's
// archive_every). They are described always but exported only once
// [Metrics.StartArchive] was called, so a relay that does not archive shows
// no archive series (and no archive alert can fire on it).
type archiveMetrics struct {
	on       atomic.Bool
	rows     *prometheus.CounterVec
	runs     *prometheus.CounterVec
	last     prometheus.Gauge
	interval prometheus.Gauge
}

func newArchiveMetrics(labels prometheus.Labels) *archiveMetrics {
	return &archiveMetrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "outbox_archived_total",
			Help:        "Sent rows the scheduled archive took out of the outbox table, by mode (move: into the archive table; delete).",
			ConstLabels: labels,
		}, []string{"mode"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "outbox_archive_runs_total",
			Help:        "Scheduled archive runs that finished, by result (ok, error). A run cut short by shutdown is not counted.",
			ConstLabels: labels,
		}, []string{"result"}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_archive_last_success_timestamp_seconds",
			Help: "Unix time the scheduled archive last made progress: a run ended without error or one of its batches " +
				"committed. The start time until then.",
			ConstLabels: labels,
		}),
		interval: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "outbox_archive_interval_seconds",
			Help:        "The scheduled archive's period (archive_every): the pause between the end of a run and the next.",
			ConstLabels: labels,
		}),
	}
}

func (a *archiveMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{a.rows, a.runs, a.last, a.interval}
}

func (a *archiveMetrics) describe(ch chan<- *prometheus.Desc) {
	for _, c := range a.collectors() {
		c.Describe(ch)
	}
}

func (a *archiveMetrics) collect(ch chan<- prometheus.Metric) {
	if !a.on.Load() {
		return
	}
	for _, c := range a.collectors() {
		c.Collect(ch)
	}
}

func archiveMode(deleted bool) string {
	if deleted {
		return ArchiveModeDelete
	}
	return ArchiveModeMove
}

// StartArchive turns on the archive series for a scheduled archive that runs
// every period and moves rows (or deletes them, when deleted is true):
// outbox_archive_interval_seconds is set to every, the last-success time to
// now (so that an alert on its age counts from the start, not from 1970),
// and the counters of the mode and of both results appear at 0. Until it is
// called no archive series is exported. Call it once, before the first run.
func (m *Metrics) StartArchive(every time.Duration, deleted bool) {
	a := m.archive
	a.interval.Set(every.Seconds())
	a.last.SetToCurrentTime()
	a.rows.WithLabelValues(archiveMode(deleted))
	a.runs.WithLabelValues(ArchiveResultOK)
	a.runs.WithLabelValues(ArchiveResultError)
	a.on.Store(true)
}

// OnArchiveBatch records one committed archive batch of rows rows, moved or
// (deleted) deleted. A batch that took rows is progress, so it also sets the
// last-success time: a first run through a large backlog may take longer
// than the alert allows, yet it is not failing.
func (m *Metrics) OnArchiveBatch(rows int64, deleted bool) {
	if rows <= 0 {
		return
	}
	m.archive.rows.WithLabelValues(archiveMode(deleted)).Add(float64(rows))
	m.archive.last.SetToCurrentTime()
}

// OnArchiveRun records the end of a scheduled archive run: ok when err is
// nil (which also sets the last-success time), else error.
func (m *Metrics) OnArchiveRun(err error) {
	if err != nil {
		m.archive.runs.WithLabelValues(ArchiveResultError).Inc()
		return
	}
	m.archive.runs.WithLabelValues(ArchiveResultOK).Inc()
	m.archive.last.SetToCurrentTime()
}
