package metrics_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/metrics"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/sqlitestore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// bundle is a real relay over a real SQLite store, instrumented by a Metrics.
type bundle struct {
	reg   *prometheus.Registry
	m     *metrics.Metrics
	db    *sql.DB
	store *sqlitestore.Store
	pub   *outboxtest.Publisher
	relay *outbox.Relay
}

func setup(t *testing.T, opts ...outbox.RelayOption) *bundle {
	t.Helper()
	db, err := sqlitestore.Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := sqlitestore.New(db)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))

	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.NewMetrics(reg, metrics.WithRelayName("orders"))
	require.NoError(t, err)
	pub := outboxtest.NewPublisher()
	opts = append([]outbox.RelayOption{
		outbox.WithName("orders"),
		outbox.WithOrdering(false, outbox.DeadBlocks), // the script's poison messages share an aggregate
		outbox.WithHooks(m),
		outbox.WithBatchSize(10),
		outbox.WithPollInterval(10 * time.Millisecond),
		outbox.WithBackoff(10*time.Millisecond, 20*time.Millisecond),
		outbox.WithProbeInterval(5*time.Millisecond, 20*time.Millisecond),
	}, opts...)
	relay, err := outbox.NewRelay(store, m.WrapPublisher(pub), opts...)
	require.NoError(t, err)
	return &bundle{reg: reg, m: m, db: db, store: store, pub: pub, relay: relay}
}

// write commits n messages of eventType in one transaction.
func (b *bundle) write(t *testing.T, eventType string, n int) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprint(i), EventType: eventType,
			Payload: []byte(`{"n":1}`)}
	}
	require.NoError(t, outbox.NewWriter(b.store).Write(ctx, tx, msgs...))
	require.NoError(t, tx.Commit())
}

// run runs the relay (flagging outbox_relay_up around it) and the stats poller
// until the returned stop is called.
func (b *bundle) run(t *testing.T) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		b.m.SetUp(true)
		defer b.m.SetUp(false)
		require.NoError(t, b.relay.Run(ctx))
	})
	wg.Go(func() { require.NoError(t, b.m.PollStats(ctx, b.store, 20*time.Millisecond)) })
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

func (b *bundle) published(t *testing.T, result, dest string) float64 {
	return valueOr(t, b.reg, "outbox_relay_published_total",
		map[string]string{"result": result, "destination": dest}, 0)
}

// TestScriptedScenario runs a real relay over N messages that go through at
// once, M that fail their first attempt and K that the broker refuses for
// good, then checks every metric against what the script makes happen.
func TestScriptedScenario(t *testing.T) {
	t.Parallel()
	const N, M, K = 20, 5, 3
	b := setup(t, outbox.WithMaxAttempts(5))
	b.pub.FailWith(func(m *outbox.Message) error {
		switch {
		case m.EventType == "ORDER_PAID" && m.Attempt == 1:
			return errors.New("broker nacked")
		case m.EventType == "ORDER_POISON":
			return outbox.Permanent(errors.New("message too large"))
		}
		return nil
	})
	b.write(t, "ORDER_CREATED", N)
	b.write(t, "ORDER_PAID", M)
	b.write(t, "ORDER_POISON", K)

	stop := b.run(t)
	testsvc.Eventually(t, 10*time.Second, func() bool {
		return b.published(t, "sent", "ORDER_CREATED") == N && b.published(t, "sent", "ORDER_PAID") == M &&
			b.published(t, "dead", "ORDER_POISON") == K
	}, "the relay did not get through the script")
	require.Equal(t, 1.0, value(t, b.reg, "outbox_relay_up", nil), "up while Run runs")
	// The table, through Store.Stats (read while the poller runs: its values go stale after it stops).
	testsvc.Eventually(t, 5*time.Second, func() bool {
		return valueOr(t, b.reg, "outbox_pending_messages", nil, -1) == 0 &&
			valueOr(t, b.reg, "outbox_dead_messages", nil, -1) == K &&
			valueOr(t, b.reg, "outbox_oldest_pending_age_seconds", nil, -1) == 0 &&
			valueOr(t, b.reg, "outbox_sent_last_minute_messages", nil, -1) == N+M &&
			valueOr(t, b.reg, "outbox_stats_up", nil, -1) == 1
	}, "stats did not catch up with the table")
	stop()

	require.NoError(t, testutil.GatherAndCompare(b.reg, strings.NewReader(`
# HELP outbox_relay_published_total Messages the relay tried to publish, by result (sent, retry, dead, unavailable; held_back: given back unpublished behind a failed message of its aggregate) and destination.
# TYPE outbox_relay_published_total counter
outbox_relay_published_total{destination="ORDER_CREATED",relay="orders",result="sent"} 20
outbox_relay_published_total{destination="ORDER_PAID",relay="orders",result="retry"} 5
outbox_relay_published_total{destination="ORDER_PAID",relay="orders",result="sent"} 5
outbox_relay_published_total{destination="ORDER_POISON",relay="orders",result="dead"} 3
# HELP outbox_relay_up 1 while the relay loop runs, 0 once it stopped.
# TYPE outbox_relay_up gauge
outbox_relay_up{relay="orders"} 0
# HELP outbox_relay_batch_errors_total Cycles cut short by a store error (claim, ack, reschedule or kill failed).
# TYPE outbox_relay_batch_errors_total counter
outbox_relay_batch_errors_total{relay="orders"} 0
# HELP outbox_relay_fenced_total Messages published but acknowledged by nobody because another relay took their rows over (lease expired).
# TYPE outbox_relay_fenced_total counter
outbox_relay_fenced_total{relay="orders"} 0
`), "outbox_relay_published_total", "outbox_relay_up", "outbox_relay_batch_errors_total", "outbox_relay_fenced_total"))

	// Attempts: N+M+K first attempts and M second ones.
	att := histogram(t, b.reg, "outbox_relay_publish_attempt", nil)
	require.EqualValues(t, N+M+K+M, att.GetSampleCount())
	require.EqualValues(t, N+M+K+2*M, att.GetSampleSum())
	require.EqualValues(t, N+M+K, bucket(t, att, 1))
	require.EqualValues(t, N+2*M+K, bucket(t, att, 2))

	lat := histogram(t, b.reg, "outbox_relay_delivery_latency_seconds", nil)
	require.EqualValues(t, N+M, lat.GetSampleCount(), "one latency per sent message")
	require.Greater(t, lat.GetSampleSum(), 0.0)

	bs := histogram(t, b.reg, "outbox_relay_batch_size", nil)
	require.EqualValues(t, N+M+K+M, bs.GetSampleSum(), "every claimed row, retries included")
	require.GreaterOrEqual(t, bs.GetSampleCount(), uint64((N+M+K+9)/10))
	bd := histogram(t, b.reg, "outbox_relay_batch_duration_seconds", nil)
	require.Equal(t, bs.GetSampleCount(), bd.GetSampleCount())
	pd := histogram(t, b.reg, "outbox_relay_publish_duration_seconds", nil)
	require.Equal(t, bs.GetSampleCount(), pd.GetSampleCount(), "one Publish call per batch")
	require.LessOrEqual(t, pd.GetSampleSum(), bd.GetSampleSum(), "publishing is part of the batch")

	require.Equal(t, 0.0, value(t, b.reg, "outbox_stats_errors_total", nil))
	require.Equal(t, 1.0, value(t, b.reg, "outbox_relay_destination_up", nil))
	require.Equal(t, N+M, b.pub.Count())
}

// TestDestinationOutage takes the broker away as a whole and brings it back.
func TestDestinationOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.pub.FailWith(func(*outbox.Message) error { return outbox.Unavailable(errors.New("connection refused")) })
	b.write(t, "ORDER_CREATED", 5)
	b.run(t)

	testsvc.Eventually(t, 10*time.Second, func() bool {
		return value(t, b.reg, "outbox_relay_destination_up", nil) == 0
	}, "the outage was not reported")
	require.Equal(t, 1.0, value(t, b.reg, "outbox_relay_destination_outages_total", nil))
	testsvc.Eventually(t, 5*time.Second, func() bool {
		return valueOr(t, b.reg, "outbox_pending_messages", nil, -1) == 5 &&
			valueOr(t, b.reg, "outbox_oldest_pending_age_seconds", nil, -1) > 0
	}, "the backlog did not show")
	require.Zero(t, series(t, b.reg, "outbox_relay_publish_attempt", nil).GetHistogram().GetSampleCount(),
		"refunded attempts are not counted as attempts")

	b.pub.FailWith(nil)
	testsvc.Eventually(t, 10*time.Second, func() bool {
		return b.published(t, "sent", "ORDER_CREATED") == 5 && value(t, b.reg, "outbox_relay_destination_up", nil) == 1
	}, "the relay did not recover")
	require.Positive(t, b.published(t, "unavailable", "ORDER_CREATED"))
	require.Zero(t, b.published(t, "retry", "ORDER_CREATED"))
	require.Equal(t, 1.0, value(t, b.reg, "outbox_relay_destination_outages_total", nil), "one outage")
}
