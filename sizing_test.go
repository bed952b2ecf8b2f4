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

// feeder feeds a sizing claims in time: each claim starts when the wait
// the sizing chose after the previous one has passed.
type feeder struct {
	s   *sizing
	now time.Time
}

func newFeeder(s *sizing) *feeder { return &feeder{s: s, now: time.Unix(1_700_000_000, 0)} }

// claim feeds one claim that found found rows (-1: all it asked for) and
// returns the sizing's decision.
func (f *feeder) claim(c claim) state {
	limit := f.s.batch
	found := c.found
	if found < 0 {
		found = limit
	}
	wait := f.s.claimed(claimSeen{start: f.now, took: c.took, limit: limit, n: found, waited: c.busy})
	f.now = f.now.Add(c.took + wait)
	return state{f.s.batch, f.s.inFlight, wait}
}

func TestSizing(t *testing.T) {
	t.Parallel()
	full := claim{found: -1}
	fullBusy := claim{found: -1, busy: true}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
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
			claims: []claim{{found: 2}, {found: 2, busy: true}, {found: 2}, {found: 2, busy: true}, {found: 2, busy: true}, {found: 2}, {}, {}, {found: 2}},
			want: []state{{10, 1, ms(2)}, {10, 2, ms(2)}, {10, 2, ms(2)}, {10, 3, ms(2)}, {10, 3, ms(2)}, {10, 3, ms(2)},
				{10, 3, ms(2)}, {10, 3, ms(2)}, {10, 3, ms(2)}},
		},
		{
			// Each empty claim waits a quarter of the time since the start
			// of the last claim that found rows (2 ms at least): the
			// silences before these claims are 0, 2, 4, 6, 8, 10, 12.5,
			// 15.625 ... ms. The wait that reaches the poll interval (here
			// 20 ms) makes the relay idle: smallest sizes, and one claim per
			// poll interval from then on, until a claim finds rows.
			name: "EmptyClaimsBackOffByAQuarterOfTheSilenceThenIdle",
			opts: []RelayOption{WithBatchSizeRange(10, 80), WithMaxInFlightRange(1, 4), WithPollInterval(20 * time.Millisecond)},
			claims: []claim{full, full, full, fullBusy, fullBusy, fullBusy, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {},
				{}, {}, {}, {}, {}, {}, {}, {found: 1}, {}},
			want: []state{{20, 1, 0}, {40, 1, 0}, {80, 1, 0}, {80, 2, 0}, {80, 3, 0}, {80, 4, 0},
				{40, 4, ms(2)}, {20, 4, ms(2)}, {10, 4, ms(2)}, {10, 4, ms(2)}, {10, 4, ms(2)},
				{10, 4, us(2500)}, {10, 4, us(3125)}, {10, 4, us(3906)}, {10, 4, us(4883)}, {10, 4, us(6104)},
				{10, 4, us(7629)}, {10, 4, us(9537)}, {10, 4, us(11_921)}, {10, 4, us(14_901)}, {10, 4, us(18_626)},
				{10, 1, ms(20)}, {10, 1, ms(20)}, {10, 1, ms(20)}, {10, 1, ms(2)}, {10, 1, ms(2)}},
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
			f := newFeeder(testSizing(t, tc.opts...))
			var got []state
			for _, c := range tc.claims {
				st := f.claim(c)
				st.wait = st.wait.Round(time.Microsecond)
				got = append(got, st)
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
	f := newFeeder(s)
	for range 3 {
		f.claim(claim{found: -1})
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
		f := newFeeder(s)
		for range 10_000 {
			var found int
			switch rng.IntN(4) {
			case 0:
				found = -1
			case 1:
				found = rng.IntN(s.batch + 1)
			case 2:
				found = 0
			default:
				found = -1
			}
			took := time.Duration(rng.IntN(3000)) * time.Millisecond
			st := f.claim(claim{found: found, took: took, busy: rng.IntN(2) == 0})
			require.GreaterOrEqual(t, st.wait, time.Duration(0))
			require.LessOrEqual(t, st.wait, time.Second)
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
// starts over: smallest batch, fewest in flight, and empty claims back off
// from the minimum poll interval again, even from idle.
func TestSizingReset(t *testing.T) {
	t.Parallel()
	s := testSizing(t)
	f := newFeeder(s)
	for range 10 {
		f.claim(claim{found: -1, busy: true})
	}
	for f.claim(claim{}).wait < time.Second {
	}
	require.Equal(t, time.Second, f.claim(claim{}).wait, "idle")
	for range 10 {
		f.claim(claim{found: -1, busy: true})
	}
	require.Greater(t, s.inFlight, DefaultMinInFlight)
	s.reset()
	require.Equal(t, []int{DefaultMinBatchSize, DefaultMinInFlight}, []int{s.batch, s.inFlight})
	require.Equal(t, DefaultMinPollInterval, f.claim(claim{}).wait)
	s.reset()
	s.idle = true // reset from idle too
	s.reset()
	require.Equal(t, DefaultMinPollInterval, f.claim(claim{}).wait)
}

// TestSizingIdleCost: once rows stop, a relay reaches one claim per poll
// interval within about four poll intervals and stays there: over an idle
// minute with the defaults it makes a few dozen claims, not one per
// minimum poll interval (30,000).
func TestSizingIdleCost(t *testing.T) {
	t.Parallel()
	s := testSizing(t)
	f := newFeeder(s)
	for range 5 {
		f.claim(claim{found: 3})
	}
	start, claims := f.now, 0
	var firstIdle time.Duration
	for f.now.Sub(start) < time.Minute {
		if st := f.claim(claim{}); st.wait == time.Second && firstIdle == 0 {
			firstIdle = f.now.Sub(start)
		}
		claims++
	}
	require.Greater(t, firstIdle, 3*time.Second)
	require.Less(t, firstIdle, 6*time.Second)
	require.Less(t, claims, 60+40)
	// From then on, exactly one claim per poll interval.
	for range 10 {
		at := f.now
		f.claim(claim{})
		require.Equal(t, time.Second, f.now.Sub(at))
	}
}
