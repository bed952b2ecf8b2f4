package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/store/pgcdc"
	"github.com/outboxkit/outbox/store/pgstore"
)

// cdcSource returns the change-data-capture source of a config with source
// cdc, polling db's store as its fallback (nil for source polling; none
// for a log-only table, which cannot be polled), and
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
	opts := []pgcdc.Option{pgcdc.WithTable(c.Table), pgcdc.WithFailoverAfter(c.CDCFailoverAfter),
		pgcdc.WithTableAttempts(!c.CDCMemoryAttempts), pgcdc.WithLogger(d.log)}
	switch {
	case len(c.Columns) == 0:
		opts = append(opts, pgcdc.WithFallback(db.Store))
	case c.LogOnly(): // never polled, never written: dead messages go to a table of the contract's layout
		opts = append(opts, pgcdc.WithColumns(c.Columns), pgcdc.WithDeadTable(c.CDCDeadTableName()))
	default: // db's store polls the mapped table (pgstore.WithColumns)
		opts = append(opts, pgcdc.WithColumns(c.Columns), pgcdc.WithFallback(db.Store))
	}
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

// checkMapped prepares and checks the table of a columns: mapping, within
// the bound of a first contact: for a log-only table it creates the dead
// table when it is missing (the contract's layout, as outbox migrate
// --table would), then it checks the mapping against the table's columns
// (src.CheckTable), so that a misspelt column stops the start with the
// mapping and the table's columns.
func (d *Daemon) checkMapped(ctx context.Context, db *DB, src *pgcdc.Source) error {
	cctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if src.LogOnly() {
		dead, err := pgstore.New(db.Pool, pgstore.WithTable(d.cfg.CDCDeadTableName()))
		if err != nil {
			return fmt.Errorf("dead table: %w", err)
		}
		if err := dead.Migrate(cctx); err != nil {
			return fmt.Errorf("create dead table %s: %w", d.cfg.CDCDeadTableName(), err)
		}
	}
	return checkTable(ctx, src)
}
