package outbox_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
)

// clockStore is an in-memory outbox.Store for the relay's timer logic, run
// inside a synctest bubble where time only moves when every goroutine waits:
// it records when each claim happened (relative to the bubble's start) and
// how many rows it returned. Rows are added with add. Acks and the rest only
// remove or keep rows; they do no I/O.
type clockStore struct {
	mu      sync.Mutex
	start   time.Time
	pending []*outbox.Message
	nextID  int64
	claims  []claimAt
	limits  []int // each claim's limit
	// aggregates, when set, spreads the rows add commits round robin over
	// this many aggregates; otherwise they all belong to one.
	aggregates int
}

type claimAt struct {
	at   time.Duration
	rows int
}

func newClockStore() *clockStore { return &clockStore{start: time.Now()} }

// add commits n rows and returns them.
func (s *clockStore) add(n int) []*outbox.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.nextID++
		agg := "1"
		if s.aggregates > 0 {
			agg = strconv.FormatInt(s.nextID%int64(s.aggregates), 10)
		}
		s.pending = append(s.pending, &outbox.Message{RowID: s.nextID, MessageID: outbox.NewMessageID(),
			AggregateType: "order", AggregateID: agg, EventType: "ORDER_PAID", Payload: []byte(`{}`)})
	}
	return s.pending[len(s.pending)-n:]
}

func (s *clockStore) history() []claimAt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]claimAt(nil), s.claims...)
}

func (s *clockStore) Claim(_ context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(p.Limit, len(s.pending))
	c := &outbox.Claim{}
	for _, m := range s.pending[:n] {
		cp := *m
		cp.Attempt = 1
		c.Messages = append(c.Messages, &cp)
	}
	s.pending = s.pending[n:]
	s.claims = append(s.claims, claimAt{at: time.Since(s.start), rows: n})
	s.limits = append(s.limits, p.Limit)
	return c, nil
}

func (s *clockStore) Ack(_ context.Context, p outbox.AckParams) (int, error) {
	return len(p.Messages), nil
}
func (s *clockStore) Reschedule(context.Context, outbox.RescheduleParams) error {
	return nil
}
func (s *clockStore) Kill(context.Context, outbox.KillParams) error { return nil }
func (s *clockStore) Stats(context.Context) (*outbox.Stats, error) {
	return &outbox.Stats{}, nil
}

// runFor runs r in the bubble for d of fake time, then stops it.
func runFor(t *testing.T, r *outbox.Relay, d time.Duration, during func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	if during != nil {
		during()
	}
	time.Sleep(d)
	cancel()
	require.NoError(t, <-done)
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }
func us(n int) time.Duration { return time.Duration(n) * time.Microsecond }
func ns(n int) time.Duration { return time.Duration(n) }

// TestRelayAdaptivePolling checks, in fake time, when the relay claims: at
// once while claims come back full, the minimum poll interval after a claim
// that found rows, then after each empty claim a quarter of the time since
// the last rows were found, up to the poll interval, where an idle relay
// stays: one claim per poll interval.
func TestRelayAdaptivePolling(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		rows    int
		poll    time.Duration // the poll interval; the minimum is 10 ms
		runFor  time.Duration
		want    []claimAt
		wantSum int
	}{
		{
			name:   "IdleCostsOneClaimPerPollInterval",
			rows:   0,
			poll:   time.Second,
			runFor: ms(10_500),
			want: []claimAt{{0, 0}, {ms(1000), 0}, {ms(2000), 0}, {ms(3000), 0}, {ms(4000), 0}, {ms(5000), 0},
				{ms(6000), 0}, {ms(7000), 0}, {ms(8000), 0}, {ms(9000), 0}, {ms(10_000), 0}},
		},
		{
			// After the claim that found rows, each empty claim waits a
			// quarter of the time since that claim, at least the minimum
			// poll interval (10 ms) and at most the poll interval (200 ms).
			name:   "PartialBatchThenBackOff",
			rows:   5,
			poll:   ms(200),
			runFor: ms(1600),
			want: []claimAt{{0, 5}, {ms(10), 0}, {ms(20), 0}, {ms(30), 0}, {ms(40), 0}, {ms(50), 0}, {us(62_500), 0},
				{us(78_125), 0}, {ns(97_656_250), 0}, {ns(122_070_312), 0}, {ns(152_587_890), 0}, {ns(190_734_862), 0},
				{ns(238_418_577), 0}, {ns(298_023_221), 0}, {ns(372_529_026), 0}, {ns(465_661_282), 0},
				{ns(582_076_602), 0}, {ns(727_595_752), 0}, {ns(909_494_690), 0}, {ns(1_109_494_690), 0},
				{ns(1_309_494_690), 0}, {ns(1_509_494_690), 0}},
		},
		{
			name:   "FullBatchesAtOnce",
			rows:   25,
			poll:   time.Second,
			runFor: ms(45),
			want:   []claimAt{{0, 10}, {0, 10}, {0, 5}, {ms(10), 0}, {ms(20), 0}, {ms(30), 0}, {ms(40), 0}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				st := newClockStore()
				st.add(tc.rows)
				pub := outboxtest.NewPublisher()
				r, err := outbox.NewRelay(st, pub, outbox.WithOrdering(false, outbox.DeadBlocks), outbox.WithBatchSize(10), outbox.WithPollInterval(tc.poll),
					outbox.WithMinPollInterval(10*time.Millisecond))
				require.NoError(t, err)
				runFor(t, r, tc.runFor, nil)
				require.Equal(t, tc.want, st.history())
				require.Equal(t, tc.rows, pub.Count())
			})
		})
	}
}

// TestRelayNotifyCutsTheWaitAndCoalesces: an idle relay with an hour-long
// poll interval claims at the moment it is notified, and a burst of
// notifications is answered by one claim.
func TestRelayNotifyCutsTheWaitAndCoalesces(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newClockStore()
		pub := outboxtest.NewPublisher()
		r, err := outbox.NewRelay(st, pub, outbox.WithPollInterval(time.Hour), outbox.WithOrdering(false, outbox.DeadBlocks))
		require.NoError(t, err)
		runFor(t, r, 10*time.Second, func() {
			synctest.Wait() // the first claim happened; the relay sleeps for an hour
			time.Sleep(5 * time.Second)
			st.add(3)
			for range 1000 { // a burst: one claim answers all of it
				r.Notify()
			}
		})
		// One claim at the notification, then the adaptive back-off (2 ms, 4 ms, ...).
		h := st.history()
		require.GreaterOrEqual(t, len(h), 4)
		m := outbox.DefaultMinPollInterval
		require.Equal(t, []claimAt{{0, 0}, {ms(5000), 3}, {ms(5000) + m, 0}, {ms(5000) + 2*m, 0}}, h[:4])
		require.Equal(t, 3, pub.Count())
	})
}

// TestRelaySaysWhenIdle: the relay logs "no rows due, relay idle" (debug)
// when an empty claim leaves it waiting the whole poll interval, once per
// idle spell: at its first claim, not again while idle, and again once the
// back-off after a claim that found rows reaches the poll interval.
func TestRelaySaysWhenIdle(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newClockStore()
		var log bytes.Buffer // read only while the relay is blocked (synctest.Wait)
		r, err := outbox.NewRelay(st, outboxtest.NewPublisher(), outbox.WithPollInterval(time.Second),
			outbox.WithMinPollInterval(10*time.Millisecond), outbox.WithOrdering(false, outbox.DeadBlocks),
			outbox.WithLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		require.NoError(t, err)
		idle := func() int {
			synctest.Wait()
			return strings.Count(log.String(), "no rows due, relay idle")
		}
		runFor(t, r, 20*time.Second, func() {
			require.Equal(t, 1, idle(), "said at the first empty claim")
			time.Sleep(5500 * time.Millisecond) // five more empty claims, a second apart
			require.Equal(t, 1, idle(), "said once per idle spell")
			st.add(3)
			r.Notify()
			// Found rows; the back-off reaches the poll interval within about
			// four of them (TestRelayAdaptivePolling).
			time.Sleep(10 * time.Second)
			require.Equal(t, 2, idle(), "said again when idle after the rows")
		})
	})
}

// TestRelayOptionsAdaptive checks the new options' validation.
func TestRelayOptionsAdaptive(t *testing.T) {
	t.Parallel()
	st := newClockStore()
	pub := outboxtest.NewPublisher()
	cases := []struct {
		name string
		opt  outbox.RelayOption
		want string // "" = valid
	}{
		{"MinPollOneMillisecond", outbox.WithMinPollInterval(time.Millisecond), ""},
		{"MinPollAbovePollIsAllowed", outbox.WithMinPollInterval(time.Hour), ""},
		{"MinPollTooShort", outbox.WithMinPollInterval(time.Microsecond), "WithMinPollInterval"},
		{"InFlightOne", outbox.WithMaxInFlight(1), ""},
		{"InFlightSixtyFour", outbox.WithMaxInFlight(64), ""},
		{"InFlightZero", outbox.WithMaxInFlight(0), "WithMaxInFlight"},
		{"InFlightTooMany", outbox.WithMaxInFlight(65), "WithMaxInFlight"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := outbox.NewRelay(st, pub, tc.opt)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// busyPublisher takes d of (fake) time for each batch and records the most
// batches it had at once.
type busyPublisher struct {
	*outboxtest.Publisher
	d         time.Duration
	mu        sync.Mutex
	now, most int
}

func (p *busyPublisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	p.mu.Lock()
	p.now++
	p.most = max(p.most, p.now)
	p.mu.Unlock()
	time.Sleep(p.d)
	p.mu.Lock()
	p.now--
	p.mu.Unlock()
	return p.Publisher.Publish(ctx, msgs)
}

// TestRelaySizesItself drains a backlog in fake time with the default
// sizing and with fixed sizes: by default the claims double from the
// smallest batch to the largest and more batches go to a slow broker at
// once, never more than the bounds allow, and the relay returns to small
// batches once the backlog is gone; fixed sizes never move.
func TestRelaySizesItself(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		opts        []outbox.RelayOption
		wantLimits  []int // the first claims' limits
		maxBatch    int
		minInFlight int // the most batches at the broker at once is at least this
		maxInFlight int // and at most this
		lastLimit   int
	}{
		{
			name:       "Defaults",
			wantLimits: []int{10, 20, 40, 80, 160, 320, 640, 1000, 1000},
			maxBatch:   outbox.DefaultMaxBatchSize, minInFlight: 2, maxInFlight: outbox.DefaultMaxInFlight,
			lastLimit: outbox.DefaultMinBatchSize,
		},
		{
			name:       "Bounds",
			opts:       []outbox.RelayOption{outbox.WithBatchSizeRange(50, 300), outbox.WithMaxInFlightRange(1, 2)},
			wantLimits: []int{50, 100, 200, 300, 300},
			maxBatch:   300, minInFlight: 2, maxInFlight: 2, lastLimit: 50,
		},
		{
			name:       "Fixed",
			opts:       []outbox.RelayOption{outbox.WithBatchSize(100), outbox.WithMaxInFlight(1)},
			wantLimits: []int{100, 100, 100},
			maxBatch:   100, minInFlight: 1, maxInFlight: 1, lastLimit: 100,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				const rows = 20_000
				st := newClockStore()
				st.add(rows)
				pub := &busyPublisher{Publisher: outboxtest.NewPublisher(), d: 20 * time.Millisecond}
				r, err := outbox.NewRelay(st, pub, append([]outbox.RelayOption{outbox.WithOrdering(false, outbox.DeadBlocks)}, tc.opts...)...) // sizing, not ordering
				require.NoError(t, err)
				runFor(t, r, time.Minute, nil)
				require.Equal(t, rows, pub.Count())
				st.mu.Lock()
				limits := append([]int(nil), st.limits...)
				st.mu.Unlock()
				require.Equal(t, tc.wantLimits, limits[:len(tc.wantLimits)])
				for _, l := range limits {
					require.LessOrEqual(t, l, tc.maxBatch)
				}
				require.Equal(t, tc.lastLimit, limits[len(limits)-1], "idle again")
				require.GreaterOrEqual(t, pub.most, tc.minInFlight)
				require.LessOrEqual(t, pub.most, tc.maxInFlight)
			})
		})
	}
}
