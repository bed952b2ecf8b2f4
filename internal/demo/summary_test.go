package demo

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWriteTable(t *testing.T) {
	t.Parallel()
	s := &Summary{
		Orders: 1000, Declined: 30, Seed: 9,
		DB: "SQLite in a temporary folder", Broker: "embedded NATS JetStream\x1b[2J",
		OutageAt: time.Second, OutageFor: 1600 * time.Millisecond, Elapsed: 6200 * time.Millisecond,
		Naive: PathResult{Name: "naive", Paid: 970, Delivered: 577, Stuck: 393, FailedAttempts: 905,
			Lost: 411, LastShipment: 5300 * time.Millisecond},
		PublishFirst: PathResult{Name: "publish-first", Paid: 678, Failed: 292, Delivered: 728, Ghosts: 50,
			DuplicatesSeen: 12, DuplicatesAbsorbed: 12, FailedAttempts: 702, LastShipment: 5100 * time.Millisecond},
		Outbox: PathResult{Name: "outbox", Paid: 970, Delivered: 970, FailedAttempts: 100,
			LastShipment: 6200 * time.Millisecond},
	}
	var b strings.Builder
	require.NoError(t, s.writeTable(&b))
	lines := strings.Split(b.String(), "\n")
	require.Contains(t, b.String(), `embedded NATS JetStream\x1b[2J`, "control runes escaped")
	require.NotContains(t, b.String(), "\x1b")

	// Each row: the label on the left, one right-aligned cell per path.
	for _, tc := range []struct {
		label string
		cells []string
	}{
		{"", []string{"naive", "publish-first", "outbox"}},
		{"orders paid", []string{"970", "678", "970"}},
		{"payments failed (customer saw an error)", []string{"0", "292", "0"}},
		{"shipment messages delivered", []string{"577", "728", "970"}},
		{`paid but not shipped ("stuck")`, []string{"393", "0", "0"}},
		{`shipped but never paid ("ghost")`, []string{"0", "50", "0"}},
		{"duplicates seen / absorbed by the inbox", []string{"0 / 0", "12 / 12", "0 / 0"}},
		{"failed publish attempts", []string{"905", "702", "100"}},
		{"last shipment at", []string{"5.3s", "5.1s", "6.2s"}},
	} {
		var row string
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), tc.label) && (tc.label != "" || strings.Contains(l, "naive")) {
				row = l
				break
			}
		}
		require.NotEmpty(t, row, "row %q", tc.label)
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(row), tc.label))
		require.Equal(t, strings.Fields(strings.Join(tc.cells, " ")), fields, "row %q", tc.label)
	}
	// The columns line up: every row of the table has the same width.
	width := len(lines[0])
	for _, l := range lines[:9] {
		require.Len(t, l, width, "%q", l)
	}
	require.Contains(t, b.String(), "broker dark from 1.0s to 2.6s; 6.2s in all")
	require.Contains(t, b.String(), "(411 lost)")
	require.Contains(t, b.String(), "seed 9")
	require.NotContains(t, b.String(), "went dead")

	s.Outbox.Dead = 2
	b.Reset()
	require.NoError(t, s.writeTable(&b))
	require.Contains(t, b.String(), "2 outbox messages went dead")
}
