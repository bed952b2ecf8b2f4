package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgcdc"
	"github.com/outboxkit/outbox/store/pgstore"
)

// TestRelayExportsSlot runs a polling relay on PostgreSQL: its /metrics
// shows the configured slot missing, then, once the slot exists with no
// reader, the slot inactive with its lag, as the alerts expect.
func TestRelayExportsSlot(t *testing.T) {
	t.Parallel()
	pool, _, dsn := testsvc.PostgresSchema(t)
	s, err := pgstore.New(pool)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	slot := testsvc.PostgresSlot(t)

	cfg := baseConfig(config.NewSecret(dsn), newNATSStream(t).broker("events"))
	cfg.HTTP, cfg.CDCSlot, cfg.CDCPublication = "127.0.0.1:0", slot, slot
	d, err := New(cfg, nil)
	require.NoError(t, err)
	running(t, d)

	sample := func(name string, extra ...string) string {
		labels := fmt.Sprintf(`relay="default",slot="%s"`, slot)
		for _, e := range extra {
			labels += "," + e
		}
		return name + "{" + labels + "}"
	}
	require.Equal(t, 1.0, metricValue(t, d, sample("outbox_cdc_slot_up")))
	require.Equal(t, 0.0, metricValue(t, d, sample("outbox_cdc_slot_exists")))
	require.Equal(t, -1.0, metricValue(t, d, sample("outbox_cdc_slot_active")), "no slot, no activity to report")

	_, err = pgcdc.Setup(t.Context(), pool, cfg.Table, slot, slot)
	require.NoError(t, err)
	testsvc.Eventually(t, 10*time.Second, func() bool { return metricValue(t, d, sample("outbox_cdc_slot_exists")) == 1 },
		"the slot never showed")
	require.Equal(t, 0.0, metricValue(t, d, sample("outbox_cdc_slot_active")))
	require.GreaterOrEqual(t, metricValue(t, d, sample("outbox_cdc_slot_lag_bytes")), 0.0)
	reserved := metricValue(t, d, sample("outbox_cdc_slot_wal_status", `wal_status="reserved"`))
	extended := metricValue(t, d, sample("outbox_cdc_slot_wal_status", `wal_status="extended"`))
	require.Equal(t, 1.0, reserved+extended, "a new slot is reserved or extended")
}
