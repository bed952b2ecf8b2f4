package metrics_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func ptr(n int64) *int64 { return &n }

// slotMetrics returns a registry whose Metrics watches slot "s1" through read.
func slotMetrics(t *testing.T, read metrics.SlotReader) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.NewMetrics(reg, metrics.WithRelayName("orders"))
	require.NoError(t, err)
	require.NoError(t, m.WatchSlot("s1", read))
	require.Error(t, m.WatchSlot("s2", read), "one slot per Metrics")
	return reg
}

func TestWatchSlot(t *testing.T) {
	t.Parallel()
	l := map[string]string{"relay": "orders", "slot": "s1"}
	status := func(s string) map[string]string { return map[string]string{"slot": "s1", "wal_status": s} }
	for _, tc := range []struct {
		name    string
		reading metrics.SlotReading
		err     error
		want    map[string]float64 // series name → value; -1 = absent
		status  map[string]float64 // wal_status → value; nil = no series
	}{
		{"Streaming", metrics.SlotReading{Exists: true, Active: true, WALStatus: "reserved", LagBytes: ptr(4096), SafeWALSize: ptr(1 << 30)}, nil,
			map[string]float64{"up": 1, "exists": 1, "active": 1, "lag_bytes": 4096, "safe_wal_size_bytes": 1 << 30},
			map[string]float64{"reserved": 1, "extended": 0, "unreserved": 0, "lost": 0}},
		{"InactiveNoLimit", metrics.SlotReading{Exists: true, WALStatus: "extended", LagBytes: ptr(5 << 30)}, nil,
			map[string]float64{"up": 1, "exists": 1, "active": 0, "lag_bytes": 5 << 30, "safe_wal_size_bytes": -1},
			map[string]float64{"reserved": 0, "extended": 1, "unreserved": 0, "lost": 0}},
		{"Lost", metrics.SlotReading{Exists: true, WALStatus: "lost"}, nil,
			map[string]float64{"up": 1, "exists": 1, "active": 0, "lag_bytes": -1, "safe_wal_size_bytes": -1},
			map[string]float64{"reserved": 0, "extended": 0, "unreserved": 0, "lost": 1}},
		{"Missing", metrics.SlotReading{}, nil,
			map[string]float64{"up": 1, "exists": 0, "active": -1, "lag_bytes": -1, "safe_wal_size_bytes": -1}, nil},
		{"ReadFails", metrics.SlotReading{Exists: true, Active: true}, errors.New("connection refused"),
			map[string]float64{"up": 0, "exists": -1, "active": -1, "lag_bytes": -1, "safe_wal_size_bytes": -1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := slotMetrics(t, func(context.Context) (metrics.SlotReading, error) { return tc.reading, tc.err })
			for name, want := range tc.want {
				require.Equal(t, want, valueOr(t, reg, "outbox_cdc_slot_"+name, l, -1), name)
			}
			for _, s := range metrics.SlotWALStatuses {
				want, ok := tc.status[s]
				if !ok {
					want = -1
				}
				require.Equal(t, want, valueOr(t, reg, "outbox_cdc_slot_wal_status", status(s), -1), s)
			}
		})
	}
}

func TestWatchSlotCachesAndBoundsReads(t *testing.T) {
	t.Parallel()
	var reads atomic.Int32
	reg := slotMetrics(t, func(context.Context) (metrics.SlotReading, error) {
		reads.Add(1)
		return metrics.SlotReading{Exists: true}, nil
	})
	for range 5 {
		_, err := reg.Gather()
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, reads.Load(), "scrapes within a second share one reading")

	// A database that never answers costs a scrape SlotReadTimeout, not more.
	reg = slotMetrics(t, func(ctx context.Context) (metrics.SlotReading, error) {
		<-ctx.Done()
		return metrics.SlotReading{}, ctx.Err()
	})
	start := time.Now()
	require.Zero(t, value(t, reg, "outbox_cdc_slot_up", nil))
	require.Less(t, time.Since(start), metrics.SlotReadTimeout+time.Second)

	// Without WatchSlot there is no slot series at all.
	plain := prometheus.NewPedanticRegistry()
	_, err := metrics.NewMetrics(plain)
	require.NoError(t, err)
	require.Equal(t, -1.0, valueOr(t, plain, "outbox_cdc_slot_up", nil, -1))
}
