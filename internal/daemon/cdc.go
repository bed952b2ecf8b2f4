package daemon

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/store/pgcdc"
)

// cdcSource returns the change-data-capture source of a config with source
// cdc, polling db's store as its fallback (nil for source polling), and
// registers its metrics on reg when there is one:
// outbox_cdc_switches_total (stream to polling or back),
// outbox_cdc_duplicates_total (messages the stream published that the
// table showed settled already) and outbox_cdc_mode (0 stream, 1 polling,
// 2 standby).
func (d *Daemon) cdcSource(db *DB, reg *prometheus.Registry) (*pgcdc.Source, error) {
	c := d.cfg
	if c.Source != config.SourceCDC {
		return nil, nil
	}
	if db.Pool == nil {
		return nil, errors.New("source cdc: needs a postgres:// database")
	}
	opts := []pgcdc.Option{pgcdc.WithTable(c.Table), pgcdc.WithFallback(db.Store),
		pgcdc.WithFailoverAfter(c.CDCFailoverAfter), pgcdc.WithTableAttempts(!c.CDCMemoryAttempts), pgcdc.WithLogger(d.log)}
	if c.CDCSlot != "" {
		opts = append(opts, pgcdc.WithSlot(c.CDCSlot))
	}
	if c.CDCPublication != "" {
		opts = append(opts, pgcdc.WithPublication(c.CDCPublication))
	}
	src, err := pgcdc.New(db.Pool, c.DB.Value(), opts...)
	if err != nil {
		return nil, err
	}
	if reg == nil {
		return src, nil
	}
	labels := prometheus.Labels{"relay": c.Name, "slot": src.Slot()}
	for _, col := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outbox_cdc_switches_total", ConstLabels: labels,
			Help: "Times the cdc source went from streaming to polling the table or back."},
			func() float64 { return float64(src.Switches()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outbox_cdc_duplicates_total", ConstLabels: labels,
			Help: "Messages the cdc stream published that the table already showed sent or dead (sent by polling during a failover)."},
			func() float64 { return float64(src.Duplicates()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outbox_cdc_mode", ConstLabels: labels,
			Help: "What the cdc source's claims read: 0 the stream, 1 the table (failover), 2 nothing (standby)."},
			func() float64 { return float64(src.Mode()) }),
	} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return src, nil
}
