package outbox

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testSizing(t *testing.T, opts ...RelayOption) *sizing {
	t.Helper()
	cfg := defaultRelayConfig()
	cfg.minPollInterval, cfg.pollInterval = 2*time.Millisecond, time.Second
	for _, o := range opts {
		o(&cfg)
	}
	require.NoError(t, cfg.validate())
	return newSizing(&cfg)
}

// claim is one claim the tests feed a sizing: how many rows it found (-1:
// all it asked for), how long it took, and whether it had to wait for a
// free slot (every batch allowed in flight was at the broker).
type claim struct {
	found int
	took  time.Duration
	busy  bool
}

// state is what a sizing decides after a claim.
type state struct {
	batch, inFlight int
	wait            time.Duration
}

func TestSizing(t *testing.T) {
	t.Parallel()
	full := claim{found: -1}
	fullBusy := claim{found: -1, busy: true}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	cases := []struct {
		name   string
		opts   []RelayOption
		claims []claim
		want   []state
	}{
		{
			name:   "BacklogDoublesTheBatchThenAddsBatchesInFlight",
			claims: []claim{full, full, full, full, full, full, full, fullBusy, full, fullBusy, fullBusy, fullBusy},
			want: []state{{20, 1, 0}, {40, 1, 0}, {80, 1, 0}, {160, 1, 0}, {320, 1, 0}, {640, 1, 0}, {1000, 1, 0},
				{1000, 2, 0}, {1000, 2, 0}, {1000, 3, 0}, {1000, 4, 0}, {1000, 4, 0}},
		},
		{
			name:   "ShortClaimsShrinkToTwiceWhatTheyFound",
			opts:   []RelayOption{WithBatchSizeRange(10, 1000), WithMaxInFlightRange(1, 4)},
			claims: []claim{full, full, full, full, full, full, full, fullBusy, fullBusy, {found: 300}, {found: 300}, {found: 3}, {found: 3}, {found: 3}},
			want: []state{{20, 1, 0}, {40, 1, 0}, {80, 1, 0}, {160, 1, 0}, {320, 1, 0}, {640, 1, 0}, {1000, 1, 0},
				{1000, 2, 0}, {1000, 3, 0}, {600, 3, ms(2)}, {600, 3, ms(2)}, {300, 3, ms(2)}, {150, 3, ms(2)}, {75, 3, ms(2)}},
		},
		{
			name:   "TrickleThatWaitsForTheBrokerAddsBatchesInFlight",
			opts:   []RelayOption{WithBatchSizeRange(10, 40), WithMaxInFlightRange(1, 3)},
			claims: []claim{{found: 2}, {found: 2, busy: true}, {found: 2}, {found: 2, busy: true}, {found: 2, busy: true}, {found: 2}, {}, {found: 2}},
			want: []state{{10, 1, ms(2)}, {10, 2, ms(2)}, {10, 2, ms(2)}, {10, 3, ms(2)}, {10, 3, ms(2)}, {10, 3, ms(2)},
				{10, 2, ms(2)}, {10, 2, ms(2)}},
		},
		{
			name: "EmptyClaimsDecayToTheMinimumAndBackOffToThePollInterval",
			opts: []RelayOption{WithBatchSizeRange(10, 80), WithMaxInFlightRange(1, 4)},
			claims: []claim{full, full, full, fullBusy, fullBusy, fullBusy, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {},
				{}, {found: 1}, {}},
			want: []state{{20, 1, 0}, {40, 1, 0}, {80, 1, 0}, {80, 2, 0}, {80, 3, 0}, {80, 4, 0},
				{40, 3, ms(2)}, {20, 2, ms(4)}, {10, 1, ms(8)},
				{10, 1, ms(16)}, {10, 1, ms(32)}, {10, 1, ms(64)}, {10, 1, ms(128)}, {10, 1, ms(256)}, {10, 1, ms(512)},
				{10, 1, ms(1000)}, {10, 1, ms(1000)}, {10, 1, ms(1000)}, {10, 1, ms(2)}, {10, 1, ms(2)}},
		},
		{
			name:   "SlowClaimHalvesTheBatch",
			claims: []claim{full, full, full, {found: -1, took: 2600 * time.Millisecond}, full},
			want:   []state{{20, 1, 0}, {40, 1, 0}, {80, 1, 0}, {40, 1, 0}, {80, 1, 0}},
		},
		{
			name:   "FixedSizesNeverMove",
			opts:   []RelayOption{WithBatchSize(100), WithMaxInFlight(2)},
			claims: []claim{full, fullBusy, {found: 3}, {}, fullBusy, {found: -1, took: time.Hour}},
			want:   []state{{100, 2, 0}, {100, 2, 0}, {100, 2, ms(2)}, {100, 2, ms(2)}, {100, 2, 0}, {100, 2, 0}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := testSizing(t, tc.opts...)
			var got []state
			for _, c := range tc.claims {
				limit := s.batch
				found := c.found
				if found < 0 {
					found = limit
				}
				wait := s.claimed(limit, found, c.took, c.busy)
				got = append(got, state{s.batch, s.inFlight, wait})
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestSizingSlowBatchHalves: a batch slower than half the publish timeout
// halves the next claim, down to the minimum.
func TestSizingSlowBatchHalves(t *testing.T) {
	t.Parallel()
	s := testSizing(t, WithPublishTimeout(2*time.Second), WithBatchSizeRange(100, 800))
	for range 3 {
		s.claimed(s.batch, s.batch, 0, false)
	}
	require.Equal(t, 800, s.batch)
	s.settled(900 * time.Millisecond) // not slow
	require.Equal(t, 800, s.batch)
	for _, want := range []int{400, 200, 100, 100} {
		s.settled(1100 * time.Millisecond)
		require.Equal(t, want, s.batch)
	}
}

// TestSizingStaysWithinBounds feeds random claims and batch times and checks
// that the batch size and the batches in flight never leave the bounds the
// user set, so that batches in flight × batch size, what a crash publishes
// again, never exceeds their product.
func TestSizingStaysWithinBounds(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 16))
	for _, b := range []struct{ minBatch, maxBatch, minInFlight, maxInFlight int }{
		{10, 1000, 1, 4}, {1, 1, 1, 1}, {7, 13, 2, 3}, {100, 100_000, 1, 64}, {5, 5, 4, 4},
	} {
		s := testSizing(t, WithBatchSizeRange(b.minBatch, b.maxBatch), WithMaxInFlightRange(b.minInFlight, b.maxInFlight))
		for range 10_000 {
			limit := s.batch
			var found int
			switch rng.IntN(4) {
			case 0:
				found = limit
			case 1:
				found = rng.IntN(limit + 1)
			case 2:
				found = 0
			default:
				found = limit
			}
			took := time.Duration(rng.IntN(3000)) * time.Millisecond
			s.claimed(limit, found, took, rng.IntN(2) == 0)
			if rng.IntN(3) == 0 {
				s.settled(time.Duration(rng.IntN(2000)) * time.Millisecond)
			}
			require.GreaterOrEqual(t, s.batch, b.minBatch)
			require.LessOrEqual(t, s.batch, b.maxBatch)
			require.GreaterOrEqual(t, s.inFlight, b.minInFlight)
			require.LessOrEqual(t, s.inFlight, b.maxInFlight)
			require.LessOrEqual(t, s.batch*s.inFlight, b.maxBatch*b.maxInFlight)
		}
	}
}

// TestSizingReset: after a store error or a destination outage the relay
// starts over: smallest batch, fewest in flight, and the shortest wait.
func TestSizingReset(t *testing.T) {
	t.Parallel()
	s := testSizing(t)
	for range 10 {
		s.claimed(s.batch, s.batch, 0, true)
	}
	for range 5 {
		s.claimed(s.batch, 0, 0, false)
	}
	require.Equal(t, 64*time.Millisecond, s.delay) // waits of 2, 4, 8, 16 and 32 ms so far
	s.reset()
	require.Equal(t, []int{DefaultMinBatchSize, DefaultMinInFlight}, []int{s.batch, s.inFlight})
	require.Equal(t, DefaultMinPollInterval, s.claimed(s.batch, 0, 0, false))
}
