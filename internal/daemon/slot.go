package daemon

import (
	"context"

	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/metrics"
	"github.com/outboxkit/outbox/store/pgcdc"
)

// watchSlot makes m export the replication slot of the config (cdc_slot, or
// the table's default) when the database is PostgreSQL, whatever the
// source: a slot left behind by a relay that went back to polling keeps
// log too, and its alerts should say so. Other databases have no slot.
func watchSlot(m *metrics.Metrics, cfg *config.Config, db *DB) error {
	if m == nil || db.Pool == nil {
		return nil
	}
	slot := cfg.CDCSlotName()
	return m.WatchSlot(slot, func(ctx context.Context) (metrics.SlotReading, error) {
		st, err := pgcdc.SlotStatus(ctx, db.Pool, slot)
		return metrics.SlotReading{Exists: st.Exists, Active: st.Active, WALStatus: st.WALStatus,
			LagBytes: st.LagBytes, SafeWALSize: st.SafeWALSize}, err
	})
}
