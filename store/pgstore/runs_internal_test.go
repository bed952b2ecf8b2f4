package pgstore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAggregatesToRead checks how many aggregates a claim by aggregate
// reads: enough for full runs while nothing else is known or each offered
// a full run, the limit over what each offered (a quarter to spare)
// otherwise, never more than the limit.
func TestAggregatesToRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		limit        int
		perAggregate int64 // thousandths of a row
		want         int
	}{
		{"unknown", 1000, 0, 4},
		{"full runs", 1000, 250_000, 4},
		{"more than a run", 1000, 900_000, 4},
		{"twenty rows each", 1000, 20_000, 63},
		{"one row each", 1000, 1000, 1000},
		{"less than one row each", 1000, 1, 1000},
		{"half a run", 100, 12_500, 10},
		{"limit one", 1, 0, 1},
		{"limit three", 3, 500, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, aggregatesToRead(tc.limit, tc.perAggregate))
		})
	}
}
