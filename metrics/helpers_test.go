package metrics_test

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// series finds the one series of family name whose labels include want, or nil.
func series(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	var found *dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue metric
				}
			}
			require.Nil(t, found, "%s%v matches more than one series", name, want)
			found = m
		}
	}
	return found
}

// value returns the value of a counter or gauge series, failing t when it is missing.
func value(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := series(t, g, name, labels)
	require.NotNil(t, m, "no series %s%v", name, labels)
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("%s is neither a counter nor a gauge", name)
	return 0
}

// valueOr returns the counter or gauge value, or def when the series does not exist.
func valueOr(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string, def float64) float64 {
	t.Helper()
	if series(t, g, name, labels) == nil {
		return def
	}
	return value(t, g, name, labels)
}

// histogram returns the histogram series of name, failing t when it is missing.
func histogram(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Histogram {
	t.Helper()
	m := series(t, g, name, labels)
	require.NotNil(t, m, "no series %s%v", name, labels)
	require.NotNil(t, m.Histogram, "%s is not a histogram", name)
	return m.Histogram
}

// bucket returns the cumulative count of h's bucket with upper bound le.
func bucket(t *testing.T, h *dto.Histogram, le float64) uint64 {
	t.Helper()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == le {
			return b.GetCumulativeCount()
		}
	}
	t.Fatalf("no bucket le=%v", le)
	return 0
}

func itoa(n uint16) string { return strconv.Itoa(int(n)) }

func atoui16(t *testing.T, s string) uint16 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 16)
	require.NoError(t, err)
	return uint16(n)
}
