package outbox_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// trickle is a fake-time model of a relay serving a steady stream of
// one-row transactions: rows commit in groups (a database commits
// concurrent transactions with one disk flush), each claim, publish and
// acknowledgement takes the time its field says, and the model records
// when each row committed and when the broker confirmed it. It runs inside
// a synctest bubble, so the times are exact and the result deterministic.
type trickle struct {
	*clockStore
	every time.Duration // a group of rows commits this often
	group int           // rows per group
	claim time.Duration // each claim's round trip
	pub   time.Duration // each publish
	ack   time.Duration // each acknowledgement
	// jitter, when set, draws each of the times above at random between 0
	// and twice its value, and one database call in 50 takes 5 times as long.
	jitter    *rand.Rand
	slowOneIn int
	// stall, when set, stops the writers for stall once every stallEvery
	// (a lock, a checkpoint, a pause of the service).
	stall, stallEvery time.Duration

	mu        sync.Mutex
	committed map[string]time.Duration // by message ID, since the start
	latency   []time.Duration
}

// vary returns d, or with jitter a random time around it; db marks a
// database call, which is sometimes slow.
func (s *trickle) vary(d time.Duration, db bool) time.Duration {
	if s.jitter == nil {
		return d
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d = time.Duration(s.jitter.Int64N(int64(2*d) + 1))
	if db && s.slowOneIn > 0 && s.jitter.IntN(s.slowOneIn) == 0 {
		d *= 5
	}
	return d
}

func (s *trickle) since() time.Duration { return time.Since(s.start) }

// write commits a group of rows every s.every until ctx ends.
func (s *trickle) write(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		for _, m := range s.add(s.group) {
			s.committed[m.MessageID] = s.since()
		}
		s.mu.Unlock()
		wait := s.vary(s.every, false)
		if s.stall > 0 && s.since()%s.stallEvery < wait {
			wait += s.stall
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// Claim takes the rows committed before it starts, and returns after its
// round trip.
func (s *trickle) Claim(ctx context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	c, err := s.clockStore.Claim(ctx, p)
	time.Sleep(s.vary(s.claim, true))
	return c, err
}

func (s *trickle) Ack(ctx context.Context, p outbox.AckParams) (int, error) {
	time.Sleep(s.vary(s.ack, true))
	return s.clockStore.Ack(ctx, p)
}

// Publish confirms msgs after s.pub and records their latency.
func (s *trickle) Publish(_ context.Context, msgs []*outbox.Message) []error {
	time.Sleep(s.vary(s.pub, false))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.since()
	for _, m := range msgs {
		if s.committed[m.MessageID] < warmup {
			continue
		}
		s.latency = append(s.latency, now-s.committed[m.MessageID])
	}
	return make([]error, len(msgs))
}

// warmup is how long the model writes before it measures: a relay starts
// idle, at its poll interval.
const warmup = 2 * time.Second

// quantile returns the q-quantile (0 to 1) of the recorded latencies.
func (s *trickle) quantile(q float64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := slices.Clone(s.latency)
	slices.Sort(l)
	return l[min(int(q*float64(len(l))), len(l)-1)]
}

// run writes for d with a relay built with opts, then stops both.
func (s *trickle) run(t *testing.T, d time.Duration, opts ...outbox.RelayOption) {
	t.Helper()
	s.clockStore, s.committed = newClockStore(), map[string]time.Duration{}
	s.clockStore.aggregates = 100 // a service's orders, not one hot order: ordering publishes one aggregate's rows one wave each
	r, err := outbox.NewRelay(s, s, opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, r.Run(ctx)) })
	wctx, stopWriting := context.WithTimeout(ctx, d)
	defer stopWriting()
	s.write(wctx)
	time.Sleep(time.Second) // the last rows go out
	cancel()
	wg.Wait()
}

// TestRelayTrickleLatency runs the default relay in the trickle model at
// 1,000 messages a second, with the database answering in 0 to 4 ms and
// the broker in 0 to 1 ms, and checks the p99 of commit to broker
// confirmation (the mean over six random seeds of each run's p99): within
// 10 ms while the writers commit in groups every 5 ms, with and without
// ordering, and within 40 ms when the writers stall for 200 ms every second
// (the wait after such a silence is at most 50 ms, a quarter of it, and the
// rows committed as it ends wait that long). Waits that doubled with each
// empty claim made these 11 ms and 66 ms. The relay never claims more often
// than once per minimum poll interval.
func TestRelayTrickleLatency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		every   time.Duration // a group of rows commits this often (on average)
		stall   time.Duration // the writers stop this long every second
		ordered bool
		maxP99  time.Duration
	}{
		{"Groups", ms(5), 0, false, ms(10)},
		{"GroupsOrdered", ms(5), 0, true, ms(10)},
		{"WritersStall", ms(2), ms(200), false, ms(40)},
		{"WritersStallOrdered", ms(2), ms(200), true, ms(40)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const seeds, writing = 6, 5 * time.Second
			var p99 time.Duration
			var claims int
			for seed := range uint64(seeds) {
				synctest.Test(t, func(t *testing.T) {
					s := &trickle{every: tc.every, group: int(tc.every / time.Millisecond), claim: ms(2), pub: us(500),
						ack: ms(2), jitter: rand.New(rand.NewPCG(seed, 16)), stall: tc.stall, stallEvery: time.Second}
					s.run(t, writing, outbox.WithOrdering(tc.ordered, outbox.DeadBlocks))
					p99 += s.quantile(0.99)
					claims += len(s.history())
				})
			}
			p99 /= seeds
			perSecond := claims / seeds / int((writing + time.Second).Seconds())
			t.Logf("%s: mean p99 %v, %d claims a second", tc.name, p99.Round(10*time.Microsecond), perSecond)
			require.LessOrEqual(t, p99, tc.maxP99)
			require.LessOrEqual(t, perSecond, int(time.Second/outbox.DefaultMinPollInterval))
		})
	}
}
