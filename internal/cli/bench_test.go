package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/benchcmd"
)

// TestBench runs `outbox bench` on the embedded defaults with small numbers
// and reads its JSON report.
func TestBench(t *testing.T) {
	t.Parallel()
	r := run(t.Context(), "bench", "--rows", "500", "--rate", "20", "--duration", "1s", "--no-baseline",
		"--batch", "100", "--in-flight", "2", "--json", "--quiet")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Empty(t, r.stderr)
	var rep benchcmd.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Drain, 1)
	require.Equal(t, 500, rep.Drain[0].Delivered)
	require.Len(t, rep.Latency, 1)
	require.Equal(t, 20, rep.Latency[0].Offered)
	require.Equal(t, 100, rep.Settings.BatchSize)
	require.Equal(t, 2, rep.Settings.MaxInFlight)
}

// TestBenchMatrix runs a small matrix on the embedded defaults: the flags
// reach the run, and a matrix runs drains only, without the default --test.
func TestBenchMatrix(t *testing.T) {
	t.Parallel()
	r := run(t.Context(), "bench", "--matrix", "relays=1,2 ordering=off,on", "--rows", "200", "--aggregates", "5",
		"--count", "2", "--batch", "50", "--json", "--quiet")
	require.Equal(t, ExitOK, r.code, r.stderr)
	var rep benchcmd.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Empty(t, rep.Drain)
	require.Empty(t, rep.Latency)
	require.NotNil(t, rep.Matrix)
	require.Equal(t, 2, rep.Matrix.Rounds)
	require.Len(t, rep.Matrix.Shapes, 2)
	for i, row := range rep.Matrix.Shapes {
		require.Equal(t, i+1, row.Relays)
		require.Equal(t, 5, row.Aggregates)
		require.Equal(t, 50, row.BatchSize)
		require.Len(t, row.Unordered, 2)
		require.Len(t, row.Ordered, 2)
		require.Positive(t, row.Ratio)
	}

	r = run(t.Context(), "bench", "--test", "drain", "--rows", "100", "--ordering", "--aggregates", "3",
		"--no-baseline", "--json", "--quiet")
	require.Equal(t, ExitOK, r.code, r.stderr)
	rep = benchcmd.Report{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.True(t, rep.Settings.Ordering)
	require.Equal(t, 3, rep.Settings.Aggregates)
	require.Nil(t, rep.Matrix)
}

func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"BadRows", []string{"--rows", "-1"}, "rows: -1 is not between"},
		{"UnknownTest", []string{"--test", "drain,soak"}, `test "soak" is unknown`},
		{"ChartNotSVG", []string{"--chart", "x.png"}, "does not end in .svg"},
		{"Arguments", []string{"now"}, "outbox bench takes no arguments"},
		{"UnknownFlag", []string{"--frobnicate"}, "frobnicate"},
		{"HeldClaimsWithBatchLease", []string{"--held-claims", "--batch-lease"}, "held claims exclude batch leases"},
		{"BadMatrix", []string{"--matrix", "colour=red"}, `matrix: axis "colour" is unknown`},
		{"MatrixWithProfile", []string{"--matrix", "shapes", "--cpuprofile", "cpu.pprof"}, "matrix: profile one shape"},
		{"MatrixWithLatency", []string{"--matrix", "shapes", "--test", "drain,latency"}, "matrix: it runs drain tests only"},
		{"BadAggregates", []string{"--aggregates", "-3"}, "aggregates: -3 is not between"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := run(t.Context(), append([]string{"bench"}, tc.args...)...)
			require.Equal(t, ExitUsage, r.code)
			require.Contains(t, requireOneLine(t, r), tc.want)
		})
	}
}
