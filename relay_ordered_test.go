package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// headStore is an in-memory outbox.Store for the relay's timer logic, run
// inside a synctest bubble. An ordered claim takes only heads (due rows none
// of whose earlier rows of the aggregate is pending or leased), as the real
// stores did before runs; with runs set, it takes runs (a head and the rows
// that follow it in its aggregate, up to the first one it cannot take), as
// ClaimParams.Ordered allows, and counts the rows of ClaimParams.Chain as
// taken. Rescheduled rows come back when due. It records
// when each claim happened and how many rows it returned.
type headStore struct {
	mu     sync.Mutex
	start  time.Time
	runs   bool
	rows   []*headRow // in id order
	claims []claimAt
}

type headRow struct {
	m        *outbox.Message
	sent     bool
	dead     bool
	leased   bool
	notAfter time.Time // not claimable before this (a reschedule)
}

func newHeadStore() *headStore { return &headStore{start: time.Now()} }

// add writes n rows for each of aggs, round robin.
func (s *headStore) add(aggs []string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		for _, agg := range aggs {
			id := int64(len(s.rows) + 1)
			s.rows = append(s.rows, &headRow{m: &outbox.Message{RowID: id, MessageID: outbox.NewMessageID(),
				AggregateType: "order", AggregateID: agg, EventType: "E", Payload: fmt.Appendf(nil, "%d", i)}})
		}
	}
}

func (s *headStore) history() []claimAt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]claimAt(nil), s.claims...)
}

func (s *headStore) Claim(_ context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	blocked := map[string]bool{} // aggregates with an earlier unsent row
	chained := map[int64]bool{}  // rows the relay holds in earlier batches
	for _, id := range p.Chain {
		chained[id] = true
	}
	c := &outbox.Claim{}
	for _, r := range s.rows {
		agg := r.m.AggregateID
		if r.sent || r.dead {
			blocked[agg] = blocked[agg] || (r.dead && p.BlockOnDead)
			continue
		}
		if s.runs && chained[r.m.RowID] {
			continue // as if it were in this claim (ClaimParams.Chain), leased or not, as pgstore does
		}
		took := false
		if !blocked[agg] && !r.leased && !r.dead && !now.Before(r.notAfter) && len(c.Messages) < p.Limit {
			r.leased, took = true, true
			r.m.Attempt++
			cp := *r.m
			c.Messages = append(c.Messages, &cp)
		}
		blocked[agg] = blocked[agg] || (p.Ordered && !(took && s.runs))
	}
	s.claims = append(s.claims, claimAt{at: now.Sub(s.start), rows: len(c.Messages)})
	return c, nil
}

func (s *headStore) row(id int64) *headRow { return s.rows[id-1] }

func (s *headStore) Ack(_ context.Context, p outbox.AckParams) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range p.Messages {
		s.row(m.RowID).sent = true
	}
	return len(p.Messages), nil
}

func (s *headStore) Reschedule(_ context.Context, p outbox.RescheduleParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rt := range p.Retries {
		r := s.row(rt.Message.RowID)
		r.leased, r.notAfter = false, rt.At
		if p.Refund {
			r.m.Attempt--
		}
	}
	return nil
}

func (s *headStore) Kill(_ context.Context, p outbox.KillParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range p.Dead {
		r := s.row(d.Message.RowID)
		r.leased, r.dead = false, true
	}
	return nil
}
func (s *headStore) Stats(context.Context) (*outbox.Stats, error) {
	return &outbox.Stats{}, nil
}

// slowPublisher takes a while at the broker, then confirms, unless fail says otherwise.
type slowPublisher struct {
	took time.Duration
	fail func(*outbox.Message) error
	n    atomic.Int64
}

func (p *slowPublisher) Publish(_ context.Context, msgs []*outbox.Message) []error {
	time.Sleep(p.took)
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if p.fail != nil {
			errs[i] = p.fail(m)
		}
		if errs[i] == nil {
			p.n.Add(1)
		}
	}
	return errs
}

// TestRelayOrderedClaimsWhenABatchSettles checks, in fake time, when an
// ordered relay claims after a claim that came back short: at the moment its
// batch is acknowledged, which is what makes the aggregates' next messages
// claimable, not after the minimum poll interval; and it does not busy-loop
// when nothing is claimable: an empty claim backs off as usual, up to one
// claim per poll interval.
func TestRelayOrderedClaimsWhenABatchSettles(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		aggs   []string
		rows   int // per aggregate
		fail   func(*outbox.Message) error
		runFor time.Duration
		want   []claimAt
	}{
		{
			// Three aggregates, four messages each, 3 ms at the broker: each claim
			// takes the three heads, the next one follows the acknowledgement.
			name: "DeepBacklogOfFewAggregates", aggs: []string{"a", "b", "c"}, rows: 4, runFor: ms(100),
			want: []claimAt{{0, 3}, {ms(3), 3}, {ms(6), 3}, {ms(9), 3}, {ms(12), 0}, {ms(22), 0}, {ms(32), 0}, {ms(42), 0},
				{ms(52), 0}, {us(62_750), 0}, {ns(76_187_500), 0}, {ns(92_984_375), 0}},
		},
		{
			name: "IdleRelayCostsOneClaimPerPollInterval", runFor: ms(3500),
			want: []claimAt{{0, 0}, {ms(1000), 0}, {ms(2000), 0}, {ms(3000), 0}},
		},
		{
			// The only head fails and waits out a long backoff: the claim after the
			// settle finds nothing, and the relay backs off instead of looping
			// (each wait a quarter of the time since the last rows, 10 ms at least).
			name: "HeadInBackoff", aggs: []string{"a"}, rows: 2, runFor: ms(450),
			fail: func(m *outbox.Message) error { return errors.New("broker busy") },
			want: []claimAt{{0, 1}, {ms(3), 0}, {ms(13), 0}, {ms(23), 0}, {ms(33), 0}, {ms(43), 0}, {us(53_750), 0},
				{ns(67_187_500), 0}, {ns(83_984_375), 0}, {ns(104_980_468), 0}, {ns(131_225_585), 0},
				{ns(164_031_981), 0}, {ns(205_039_976), 0}, {ns(256_299_970), 0}, {ns(320_374_962), 0},
				{ns(400_468_702), 0}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				st := newHeadStore()
				st.add(tc.aggs, tc.rows)
				pub := &slowPublisher{took: ms(3), fail: tc.fail}
				r, err := outbox.NewRelay(st, pub, outbox.WithBatchSize(10), outbox.WithPollInterval(time.Second),
					outbox.WithMinPollInterval(10*time.Millisecond), outbox.WithOrdering(true, outbox.DeadBlocks),
					outbox.WithBackoff(time.Hour, time.Hour))
				require.NoError(t, err)
				runFor(t, r, tc.runFor, nil)
				require.Equal(t, tc.want, st.history())
				if tc.fail == nil {
					require.EqualValues(t, len(tc.aggs)*tc.rows, pub.n.Load())
				}
			})
		})
	}
}

// hungBroker is a publisher whose broker is down: while down, Publish fails
// as unavailable and Ping never answers (a broker that accepted the
// connection and then went silent), until its context ends.
type hungBroker struct {
	down  atomic.Bool
	pings atomic.Int64
	sent  atomic.Int64
}

func (b *hungBroker) Publish(_ context.Context, msgs []*outbox.Message) []error {
	if b.down.Load() {
		return outbox.ErrorsFor(len(msgs), outbox.Unavailable(errors.New("connection refused")))
	}
	b.sent.Add(int64(len(msgs)))
	return make([]error, len(msgs))
}

func (b *hungBroker) Ping(ctx context.Context) error {
	b.pings.Add(1)
	if !b.down.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestRelayProbeBoundsAHungPing puts the destination down behind a Ping that
// never answers: each probe's Ping gives up after the publish timeout, so the
// relay keeps probing and resumes once the broker is back, instead of waiting
// on the first Ping for ever.
func TestRelayProbeBoundsAHungPing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newHeadStore()
		st.add([]string{"a", "b", "c", "d", "e"}, 1)
		b := &hungBroker{}
		b.down.Store(true)
		r, err := outbox.NewRelay(st, b, outbox.WithPublishTimeout(time.Second), outbox.WithLease(2*time.Second),
			outbox.WithProbeInterval(time.Second, 4*time.Second))
		require.NoError(t, err)
		var pingsWhileDown int64
		runFor(t, r, time.Minute, func() {
			time.Sleep(30 * time.Second)
			pingsWhileDown = b.pings.Load()
			b.down.Store(false)
		})
		require.GreaterOrEqual(t, pingsWhileDown, int64(3), "the relay went on probing while the broker was down")
		require.EqualValues(t, 5, b.sent.Load(), "delivered once the broker was back")
	})
}
