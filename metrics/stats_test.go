package metrics_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestPollStatsRejects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.ErrorContains(t, b.m.PollStats(ctx, b.store, -time.Second), "negative")
	require.ErrorContains(t, b.m.PollStats(ctx, nil, time.Second), "source is nil")

	b.run(t) // polls
	testsvc.Eventually(t, 5*time.Second, func() bool {
		return series(t, b.reg, "outbox_stats_up", nil) != nil
	}, "the poller did not start")
	require.ErrorContains(t, b.m.PollStats(ctx, b.store, time.Second), "already polling")
}

// TestPollStatsStoreGoesAway closes the database under a running poller: the
// last backlog outlives the first failure, then vanishes.
func TestPollStatsStoreGoesAway(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, "ORDER_CREATED", 3)
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.NewMetrics(reg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, m.PollStats(ctx, b.store, 20*time.Millisecond)) })
	defer func() { cancel(); wg.Wait() }()

	testsvc.Eventually(t, 5*time.Second, func() bool {
		return valueOr(t, reg, "outbox_pending_messages", nil, -1) == 3 &&
			valueOr(t, reg, "outbox_oldest_pending_age_seconds", nil, -1) > 0
	}, "the backlog did not show")
	require.Equal(t, 1.0, value(t, reg, "outbox_stats_up", nil))
	require.Equal(t, 0.0, value(t, reg, "outbox_dead_messages", nil))
	require.GreaterOrEqual(t, value(t, reg, "outbox_stats_duration_seconds", nil), 0.0)

	require.NoError(t, b.db.Close())
	testsvc.Eventually(t, 5*time.Second, func() bool {
		return value(t, reg, "outbox_stats_up", nil) == 0
	}, "the failure did not show")
	require.Positive(t, value(t, reg, "outbox_stats_errors_total", nil))
	require.Equal(t, 3.0, value(t, reg, "outbox_pending_messages", nil), "one failure keeps the last values")
	testsvc.Eventually(t, 15*time.Second, func() bool {
		return series(t, reg, "outbox_pending_messages", nil) == nil &&
			series(t, reg, "outbox_oldest_pending_age_seconds", nil) == nil &&
			series(t, reg, "outbox_dead_messages", nil) == nil &&
			series(t, reg, "outbox_other_status_messages", nil) == nil
	}, "stale values are still exported")
	require.Equal(t, 0.0, value(t, reg, "outbox_stats_up", nil))
}

// TestPollStatsOtherStatus: rows another program gave a status the relay does
// not know (here 7 and a text) are exported apart from the pending, sent and
// dead ones, so an operator sees them although the relay never touches them.
func TestPollStatsOtherStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, "ORDER_CREATED", 5)
	for _, tc := range []struct {
		status any
		id     int
	}{{7, 1}, {"sent", 2}} {
		res, err := b.db.Exec("UPDATE outbox_message SET status = ? WHERE id = ?", tc.status, tc.id)
		require.NoError(t, err)
		n, err := res.RowsAffected()
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
	}
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.NewMetrics(reg, metrics.WithRelayName("orders"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, m.PollStats(ctx, b.store, 20*time.Millisecond)) })
	defer func() { cancel(); wg.Wait() }()

	labels := map[string]string{"relay": "orders"}
	testsvc.Eventually(t, 5*time.Second, func() bool {
		return valueOr(t, reg, "outbox_other_status_messages", labels, -1) == 2
	}, "the other-status rows did not show")
	require.Equal(t, 3.0, value(t, reg, "outbox_pending_messages", labels), "counted apart from the pending rows")
	require.Equal(t, 0.0, value(t, reg, "outbox_dead_messages", labels))

	_, err = b.db.Exec("UPDATE outbox_message SET status = 0 WHERE id = 1")
	require.NoError(t, err)
	testsvc.Eventually(t, 5*time.Second, func() bool {
		return value(t, reg, "outbox_other_status_messages", labels) == 1
	}, "the gauge follows the table")
}
