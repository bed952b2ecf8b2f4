package metrics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestNewMetricsRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []metrics.Option
		want []string
	}{
		{"EmptyRelayName", []metrics.Option{metrics.WithRelayName("")}, []string{"WithRelayName"}},
		{"NilDestinationLabel", []metrics.Option{metrics.WithDestinationLabel(nil)}, []string{"WithDestinationLabel"}},
		{"ZeroMaxDestinations", []metrics.Option{metrics.WithMaxDestinations(0)}, []string{"WithMaxDestinations: 0"}},
		{"AllAtOnce", []metrics.Option{metrics.WithRelayName(""), metrics.WithMaxDestinations(-1)},
			[]string{"WithRelayName", "WithMaxDestinations: -1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewPedanticRegistry()
			m, err := metrics.NewMetrics(reg, tc.opts...)
			require.Error(t, err)
			require.Nil(t, m)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			n, err := testutil.GatherAndCount(reg)
			require.NoError(t, err)
			require.Zero(t, n, "nothing is registered on error")
		})
	}
}

func TestNewMetricsRegistersOnePerRelayName(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	a, err := metrics.NewMetrics(reg, metrics.WithRelayName("orders"))
	require.NoError(t, err)
	b, err := metrics.NewMetrics(reg, metrics.WithRelayName("payments"))
	require.NoError(t, err, "two relays share a registry")
	_, err = metrics.NewMetrics(reg, metrics.WithRelayName("orders"))
	require.Error(t, err, "the same relay name twice")
	require.ErrorContains(t, err, `relay "orders"`)

	a.SetUp(true)
	b.SetUp(false)
	require.Equal(t, 1.0, value(t, reg, "outbox_relay_up", map[string]string{"relay": "orders"}))
	require.Equal(t, 0.0, value(t, reg, "outbox_relay_up", map[string]string{"relay": "payments"}))
	require.Panics(t, func() { _, _ = metrics.NewMetrics(nil) })
}

func TestSetUpCountsRelayLoops(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.NewMetrics(reg)
	require.NoError(t, err)
	up := func() float64 { return value(t, reg, "outbox_relay_up", nil) }
	for _, step := range []struct {
		up   bool
		want float64
	}{
		{true, 1}, {true, 1}, {false, 1}, {false, 0}, {false, 0}, {true, 1},
	} {
		m.SetUp(step.up)
		require.Equal(t, step.want, up(), "after SetUp(%v)", step.up)
	}
}

func TestNewMetricsDefaults(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	_, err := metrics.NewMetrics(reg)
	require.NoError(t, err)
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP outbox_relay_up 1 while the relay loop runs, 0 once it stopped.
# TYPE outbox_relay_up gauge
outbox_relay_up{relay="default"} 0
# HELP outbox_relay_destination_up 0 while the relay finds the broker down and pauses to probe it, else 1.
# TYPE outbox_relay_destination_up gauge
outbox_relay_destination_up{relay="default"} 1
`), "outbox_relay_up", "outbox_relay_destination_up")
	require.NoError(t, err)
	// No poll ran: the table gauges are absent rather than a misleading 0.
	require.Nil(t, series(t, reg, "outbox_pending_messages", nil))
	require.Nil(t, series(t, reg, "outbox_stats_up", nil))
}

func TestDestinationLabelIsBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		opts  []metrics.Option
		dests []string // the messages' topics, in order
		want  map[string]float64
	}{
		{
			name:  "FirstSeenKeepTheirOwn",
			opts:  []metrics.Option{metrics.WithMaxDestinations(2)},
			dests: []string{"a", "b", "c", "a", "d", "b", "c"},
			want:  map[string]float64{"a": 2, "b": 2, metrics.OtherDestination: 3},
		},
		{
			name:  "UnderTheCap",
			dests: []string{"a", "b", "a"},
			want:  map[string]float64{"a": 2, "b": 1},
		},
		{
			name: "CustomLabel",
			opts: []metrics.Option{metrics.WithDestinationLabel(func(m *outbox.Message) string {
				return strings.SplitN(m.Destination(), ".", 2)[0]
			})},
			dests: []string{"orders.1", "orders.2", "users.9"},
			want:  map[string]float64{"orders": 2, "users": 1},
		},
		{
			name:  "DroppedDetail",
			opts:  []metrics.Option{metrics.WithDestinationLabel(func(*outbox.Message) string { return "" })},
			dests: []string{"x", "y", "z"},
			want:  map[string]float64{"": 3},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewPedanticRegistry()
			m, err := metrics.NewMetrics(reg, tc.opts...)
			require.NoError(t, err)
			for _, d := range tc.dests {
				m.OnMessage(outbox.MessageEvent{Message: &outbox.Message{Topic: d, EventType: "E", Attempt: 1},
					Result: outbox.ResultSent})
			}
			mfs, err := reg.Gather()
			require.NoError(t, err)
			got := map[string]float64{}
			for _, mf := range mfs {
				if mf.GetName() != "outbox_relay_published_total" {
					continue
				}
				for _, s := range mf.GetMetric() {
					for _, lp := range s.GetLabel() {
						if lp.GetName() == "destination" {
							got[lp.GetValue()] += s.GetCounter().GetValue()
						}
					}
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestHooksRecordSynthesizedEvents(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.NewMetrics(reg, metrics.WithRelayName("r"))
	require.NoError(t, err)
	created := time.Now().Add(-2 * time.Second)
	msg := func(attempt int) *outbox.Message {
		return &outbox.Message{EventType: "ORDER_PAID", Attempt: attempt, CreatedAt: created}
	}
	m.OnMessage(outbox.MessageEvent{Message: msg(1), Result: outbox.ResultSent, Latency: 2 * time.Second})
	m.OnMessage(outbox.MessageEvent{Message: msg(3), Result: outbox.ResultSent, Latency: 40 * time.Second})
	m.OnMessage(outbox.MessageEvent{Message: msg(1), Result: outbox.ResultRetry, Err: errors.New("nack")})
	m.OnMessage(outbox.MessageEvent{Message: msg(2), Result: outbox.ResultUnavailable, Err: errors.New("down")})
	m.OnMessage(outbox.MessageEvent{Message: msg(5), Result: outbox.ResultDead, Err: errors.New("gave up")})
	m.OnMessage(outbox.MessageEvent{Message: msg(1), Result: outbox.ResultDead,
		Err: &outbox.ExpiredError{ExpiresAt: created, ClaimedAt: time.Now()}})
	// A sent message without created_at has no latency to report.
	m.OnMessage(outbox.MessageEvent{Message: &outbox.Message{EventType: "ORDER_PAID", Attempt: 1}, Result: outbox.ResultSent})
	// A database clock ahead of ours must not make a negative latency.
	m.OnMessage(outbox.MessageEvent{Message: msg(1), Result: outbox.ResultSent, Latency: -time.Second})

	m.OnBatch(outbox.BatchEvent{Claimed: 7, Sent: 4, Retried: 1, Dead: 1, Fenced: 2, Gone: 3, Duration: 30 * time.Millisecond})
	m.OnBatch(outbox.BatchEvent{Err: errors.New("claim batch: connection refused")})
	m.OnDestination(false, errors.New("down"))

	l := func(result string) map[string]string {
		return map[string]string{"relay": "r", "result": result, "destination": "ORDER_PAID"}
	}
	require.Equal(t, 4.0, value(t, reg, "outbox_relay_published_total", l("sent")))
	require.Equal(t, 1.0, value(t, reg, "outbox_relay_published_total", l("retry")))
	require.Equal(t, 1.0, value(t, reg, "outbox_relay_published_total", l("unavailable")))
	require.Equal(t, 2.0, value(t, reg, "outbox_relay_published_total", l("dead")))
	require.Equal(t, 1.0, value(t, reg, "outbox_relay_expired_total", nil), "only the expired dead message")

	att := histogram(t, reg, "outbox_relay_publish_attempt", nil)
	require.EqualValues(t, 7, att.GetSampleCount(), "the unavailable attempt was refunded, so not observed")
	require.EqualValues(t, 1+3+1+5+1+1+1, att.GetSampleSum())
	require.EqualValues(t, 5, bucket(t, att, 1))

	lat := histogram(t, reg, "outbox_relay_delivery_latency_seconds", nil)
	require.EqualValues(t, 3, lat.GetSampleCount())
	require.InDelta(t, 42.0, lat.GetSampleSum(), 1e-9)
	require.EqualValues(t, 1, bucket(t, lat, 0.005), "the negative latency counts as 0")
	require.EqualValues(t, 2, bucket(t, lat, 2.5))

	bs := histogram(t, reg, "outbox_relay_batch_size", nil)
	require.EqualValues(t, 1, bs.GetSampleCount(), "a failed claim claimed nothing")
	require.EqualValues(t, 7, bs.GetSampleSum())
	bd := histogram(t, reg, "outbox_relay_batch_duration_seconds", nil)
	require.InDelta(t, 0.03, bd.GetSampleSum(), 1e-9)
	require.Equal(t, 1.0, value(t, reg, "outbox_relay_batch_errors_total", nil))
	require.Equal(t, 2.0, value(t, reg, "outbox_relay_fenced_total", nil))
	require.Equal(t, 3.0, value(t, reg, "outbox_relay_gone_total", nil), "deleted rows are not counted as fenced")
	require.Equal(t, 0.0, value(t, reg, "outbox_relay_destination_up", nil))
	require.Equal(t, 1.0, value(t, reg, "outbox_relay_destination_outages_total", nil))

	m.OnDestination(true, nil)
	require.Equal(t, 1.0, value(t, reg, "outbox_relay_destination_up", nil))
	require.Equal(t, 1.0, value(t, reg, "outbox_relay_destination_outages_total", nil))
}
