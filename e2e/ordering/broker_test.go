package ordering_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// fault decides what happens to one delivery attempt of a message.
type fault struct {
	err    error         // the attempt fails with err (nil: it succeeds)
	freeze time.Duration // before delivering, the relay freezes this long, deadline or not (a SIGSTOP)
}

// broker is an in-memory broker behind an outbox.Publisher that checks, at
// the moment each message arrives, the ordering guarantee: the first copy
// of message k+1 of an aggregate arrives only after message k was confirmed.
// Faults are injected per message and attempt. It is safe for concurrent use.
type broker struct {
	t      testing.TB
	faults func(m *outbox.Message, b body) fault
	// dead, when set, reports whether message seq of agg is dead: a first copy
	// that arrives after a dead predecessor is a skip (DeadSkips), not a violation.
	dead func(agg string, seq int) bool

	mu         sync.Mutex
	confirmed  map[string]map[int]bool // aggregate -> seqs confirmed at least once
	first      map[string][]int        // aggregate -> seqs in order of their first confirmation
	deliveries int                     // every confirmed copy, duplicates included
	violations []string                // first copies that overtook an unconfirmed predecessor
	skips      []string                // first copies that went past a dead predecessor
	stale      int                     // copies of an old message that arrived after a later one of its aggregate
	failed     int                     // attempts failed on purpose
	frozen     int                     // attempts that froze
	top        map[string]int          // aggregate -> highest seq confirmed
}

func newBroker(t testing.TB, faults func(*outbox.Message, body) fault) *broker {
	return &broker{t: t, faults: faults, confirmed: map[string]map[int]bool{}, first: map[string][]int{},
		top: map[string]int{}}
}

// Publish delivers the batch in order, one message at a time.
func (b *broker) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		bd := decode(b.t, m)
		var f fault
		if b.faults != nil {
			f = b.faults(m, bd)
		}
		if f.freeze > 0 {
			b.mu.Lock()
			b.frozen++
			b.mu.Unlock()
			time.Sleep(f.freeze) // a frozen process does not watch its deadline; its write goes out when it thaws
		} else if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if f.err != nil {
			b.mu.Lock()
			b.failed++
			b.mu.Unlock()
			errs[i] = f.err
			continue
		}
		b.deliver(bd)
	}
	return errs
}

func (b *broker) deliver(bd body) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deliveries++
	seen := b.confirmed[bd.Agg]
	if seen == nil {
		seen = map[int]bool{}
		b.confirmed[bd.Agg] = seen
		b.top[bd.Agg] = -1
	}
	if seen[bd.Seq] {
		if bd.Seq < b.top[bd.Agg] {
			b.stale++
		}
		return
	}
	if bd.Seq > 0 && !seen[bd.Seq-1] {
		if b.dead != nil && b.dead(bd.Agg, bd.Seq-1) {
			b.skips = append(b.skips, fmt.Sprintf("%s #%d went past dead #%d", bd.Agg, bd.Seq, bd.Seq-1))
		} else {
			b.violations = append(b.violations,
				fmt.Sprintf("%s #%d arrived before #%d was confirmed", bd.Agg, bd.Seq, bd.Seq-1))
		}
	}
	seen[bd.Seq] = true
	b.first[bd.Agg] = append(b.first[bd.Agg], bd.Seq)
	b.top[bd.Agg] = max(b.top[bd.Agg], bd.Seq)
}

// distinct returns how many distinct messages were confirmed.
func (b *broker) distinct() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.confirmed {
		n += len(s)
	}
	return n
}

// firstOrder returns the seqs of agg in the order their first copies arrived.
func (b *broker) firstOrder(agg string) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.first[agg]...)
}

type brokerStats struct {
	Deliveries, Stale, Failed, Frozen int
	Violations, Skips                 []string
}

func (b *broker) stats() brokerStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return brokerStats{Deliveries: b.deliveries, Stale: b.stale, Failed: b.failed, Frozen: b.frozen,
		Violations: append([]string(nil), b.violations...), Skips: append([]string(nil), b.skips...)}
}

// chance returns a number in [0, 100) fixed for the message and attempt, so
// that faults do not depend on timing.
func chance(m *outbox.Message, salt string) int {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d/%s", m.MessageID, m.Attempt, salt)
	return int(h.Sum32() % 100)
}

// relays runs n relays, each on a store of its own, until the test ends or
// the returned stop is called.
func relays(t testing.TB, be *backend, n int, pub outbox.Publisher, opts ...outbox.RelayOption) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		r, err := outbox.NewRelay(be.newStore(t), pub, append([]outbox.RelayOption{
			outbox.WithName(fmt.Sprintf("relay-%d", i)), outbox.WithPollInterval(10 * time.Millisecond),
		}, opts...)...)
		require.NoError(t, err)
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				t.Errorf("relay %d: %v", i, err)
			}
		})
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}
