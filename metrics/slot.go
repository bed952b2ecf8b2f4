package metrics

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SlotReading is one reading of a PostgreSQL replication slot, as
// [Metrics.WatchSlot] exports it (pgcdc.SlotStatus reads one).
type SlotReading struct {
	// Exists is false when no slot has the name; nothing else is exported then.
	Exists bool
	// Active is true while a process streams the slot.
	Active bool
	// WALStatus is reserved, extended, unreserved or lost.
	WALStatus string
	// LagBytes is the log written past what the slot's reader confirmed;
	// nil when unknown.
	LagBytes *int64
	// SafeWALSize is the log that can still be written before the slot is
	// at risk of being lost; nil when max_slot_wal_keep_size is -1 (no
	// limit).
	SafeWALSize *int64
}

// SlotReader reads a replication slot. It must honour ctx.
type SlotReader func(ctx context.Context) (SlotReading, error)

// SlotWALStatuses are the values of the wal_status label of
// outbox_cdc_slot_wal_status, one series each.
var SlotWALStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// Bounds of a slot reading made at scrape time.
const (
	// SlotReadTimeout bounds one reading, so that a database that does not
	// answer never makes a scrape time out.
	SlotReadTimeout = 2 * time.Second
	// SlotReadCache is how long one reading answers the scrapes that
	// follow it (as /readyz caches its checks), so that many scrapers cost
	// one query a second at most.
	SlotReadCache = time.Second
)

// slotCollector exports a replication slot read at scrape time.
type slotCollector struct {
	up, exists, active, lag, safe, walStatus *prometheus.Desc
	log                                      *slog.Logger

	mu      sync.Mutex // held through a reading, so that concurrent scrapes share it
	slot    string
	read    SlotReader
	last    SlotReading
	lastErr error
	at      time.Time // when last was read; zero before the first reading
}

func newSlotCollector(labels prometheus.Labels, log *slog.Logger) *slotCollector {
	desc := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"slot"}, extra...), labels)
	}
	return &slotCollector{
		log: log,
		up: desc("outbox_cdc_slot_up",
			"1 when the last reading of the replication slot (pg_replication_slots) succeeded, else 0."),
		exists: desc("outbox_cdc_slot_exists",
			"1 when the replication slot exists, else 0."),
		active: desc("outbox_cdc_slot_active",
			"1 while a process (a CDC relay) streams the replication slot; 0 while none does and the slot holds log."),
		lag: desc("outbox_cdc_slot_lag_bytes",
			"Write-ahead log written past what the slot's reader confirmed (pg_current_wal_lsn() - confirmed_flush_lsn)."),
		safe: desc("outbox_cdc_slot_safe_wal_size_bytes",
			"Log that can still be written before the slot is at risk of being lost (safe_wal_size); absent with max_slot_wal_keep_size = -1."),
		walStatus: desc("outbox_cdc_slot_wal_status",
			"1 for the slot's wal_status (reserved, extended, unreserved, lost), 0 for the others.", "wal_status"),
	}
}

// WatchSlot makes m export the replication slot named slot, read by read
// when /metrics is scraped (within SlotReadTimeout, one reading serving the
// scrapes of SlotReadCache): outbox_cdc_slot_up (1 when the reading
// succeeded), outbox_cdc_slot_exists, and for a slot that exists
// outbox_cdc_slot_active, outbox_cdc_slot_lag_bytes,
// outbox_cdc_slot_safe_wal_size_bytes (absent with no limit) and
// outbox_cdc_slot_wal_status (one series per wal_status, 1 for the current
// one), each labelled slot beside relay. A failed reading is logged at Warn
// and exports only outbox_cdc_slot_up 0. Unlike the backlog (PollStats),
// the slot is read at scrape time: the query is one row of a system view,
// and an alert on a slot that fills the disk wants the value of now.
//
// Call it at most once, before the first scrape; it returns an error for a
// second call, a nil read or an empty slot.
func (m *Metrics) WatchSlot(slot string, read SlotReader) error {
	if slot == "" || read == nil {
		return errors.New("metrics: watch slot: slot name or reader missing")
	}
	s := m.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.read != nil {
		return errors.New("metrics: watch slot: already watching " + s.slot)
	}
	s.slot, s.read = slot, read
	return nil
}

// reading returns a reading no older than SlotReadCache, taking one if
// needed; ok is false before WatchSlot.
func (s *slotCollector) reading() (r SlotReading, err error, slot string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.read == nil {
		return r, nil, "", false
	}
	if s.at.IsZero() || time.Since(s.at) >= SlotReadCache {
		ctx, cancel := context.WithTimeout(context.Background(), SlotReadTimeout)
		s.last, s.lastErr = s.read(ctx)
		cancel()
		s.at = time.Now()
		if s.lastErr != nil {
			s.log.Warn("replication slot reading failed", "slot", s.slot, "error", s.lastErr.Error())
		}
	}
	return s.last, s.lastErr, s.slot, true
}

func (s *slotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.up, s.exists, s.active, s.lag, s.safe, s.walStatus} {
		ch <- d
	}
}

func (s *slotCollector) Collect(ch chan<- prometheus.Metric) {
	r, err, slot, ok := s.reading()
	if !ok {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{slot}, labels...)...)
	}
	gauge(s.up, boolFloat(err == nil))
	if err != nil {
		return
	}
	gauge(s.exists, boolFloat(r.Exists))
	if !r.Exists {
		return
	}
	gauge(s.active, boolFloat(r.Active))
	if r.LagBytes != nil {
		gauge(s.lag, float64(*r.LagBytes))
	}
	if r.SafeWALSize != nil {
		gauge(s.safe, float64(*r.SafeWALSize))
	}
	for _, st := range SlotWALStatuses {
		gauge(s.walStatus, boolFloat(r.WALStatus == st), st)
	}
}
