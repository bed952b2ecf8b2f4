package demo

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   Config
		want Config // Logger is not compared
	}{
		{"Zero", Config{}, Config{
			Orders: DefaultOrders, PayTime: DefaultPayTime,
			OutageAt: time.Second, OutageFor: 1600 * time.Millisecond,
			Declines: DefaultDeclines, DrainTimeout: DefaultDrainTimeout,
		}},
		{"OutageFollowsPayTime", Config{PayTime: 10 * time.Second}, Config{
			Orders: DefaultOrders, PayTime: 10 * time.Second,
			OutageAt: 2500 * time.Millisecond, OutageFor: 4 * time.Second,
			Declines: DefaultDeclines, DrainTimeout: DefaultDrainTimeout,
		}},
		{"NegativeDeclinesMeanNone", Config{Orders: 5, Declines: -1, OutageAt: 1, OutageFor: 2}, Config{
			Orders: 5, PayTime: DefaultPayTime, OutageAt: 1, OutageFor: 2,
			Declines: 0, DrainTimeout: DefaultDrainTimeout,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tc.in.withDefaults()
			require.NotNil(t, got.Logger)
			got.Logger = nil
			require.Equal(t, tc.want, got)
			require.NoError(t, got.validate())
		})
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		orders       int
		declines     float64
		wantDeclined int
	}{
		{"Default", 1000, DefaultDeclines, 30},
		{"Rounds", 200, DefaultDeclines, 6},
		{"None", 50, -1, 0},
		{"One", 1, DefaultDeclines, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Orders: tc.orders, Declines: tc.declines}.withDefaults()
			r := &runner{cfg: cfg, seed: 42}
			declined, offsets := r.plan()
			require.Len(t, declined, tc.orders)
			require.Equal(t, tc.wantDeclined, trues(declined))
			require.Len(t, offsets, tc.orders)
			require.True(t, slices.IsSorted(offsets), "orders arrive in id order")
			require.GreaterOrEqual(t, offsets[0], time.Duration(0))
			require.Less(t, offsets[len(offsets)-1], cfg.PayTime)

			again, againOffsets := (&runner{cfg: cfg, seed: 42}).plan()
			require.Equal(t, declined, again, "the same seed declines the same orders")
			require.Equal(t, offsets, againOffsets)
			if tc.wantDeclined > 1 {
				other, _ := (&runner{cfg: cfg, seed: 43}).plan()
				require.NotEqual(t, declined, other, "another seed declines other orders")
			}
		})
	}
}

func TestRebind(t *testing.T) {
	t.Parallel()
	const q = "UPDATE t SET status = ? WHERE id = ? AND status = ?"
	require.Equal(t, q, sqliteDialect.rebind(q))
	require.Equal(t, "UPDATE t SET status = $1 WHERE id = $2 AND status = $3", postgresDialect.rebind(q))
}
