// Package runcheck holds a check that the stores' tests share: ordered
// claims, side by side with writers, never hand out a message before its
// predecessor was confirmed.
package runcheck

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// Violations runs writers and ordered claimers side by side on s and returns
// how many messages were claimed out of order. Three writers commit
// messages through write, one to three of one aggregate per transaction,
// each writer to six aggregates of its own, in sequence. Four claimers make
// ordered claims (BlockOnDead, limits of 1 to 12, leases of an hour, so
// every message is claimed once) until everything written is acknowledged.
// A claimer checks that each message it claimed is the one after the last
// one the broker confirmed of its aggregate (or after its predecessor in
// the same claim), "publishes" them (a short wait, then they count as
// confirmed), then acknowledges them. A claim that handed out row k+1 of an
// aggregate while row k was pending outside it counts as a violation, unless
// row k was confirmed meanwhile: a store that breaks the rule shows some in
// most runs, not in every one. It fails t if the claimers cannot drain the
// table within two minutes.
func Violations(t *testing.T, s outbox.Store, write func(ctx context.Context, msgs []*outbox.Message) error) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := &checker{t: t, s: s, write: write, published: map[string]int{}}
	var wg, writing sync.WaitGroup
	for w := range writers {
		writing.Go(func() { c.writer(ctx, w) })
	}
	writersDone := make(chan struct{})
	go func() { writing.Wait(); close(writersDone) }()
	for id := range claimers {
		wg.Go(func() { c.claimer(ctx, id, writersDone) })
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "the claimers did not drain the table in time")
	require.Equal(t, c.written.Load(), c.acked.Load())
	return int(c.violation.Load())
}

// The shape of a [Violations] run: three writers, each to six aggregates
// of its own in sixty transactions, and four claimers.
const writers, aggsPerWriter, txPerWriter, claimers = 3, 6, 60, 4

// checker is the state that the writers and claimers of one [Violations]
// run share.
type checker struct {
	t     *testing.T
	s     outbox.Store
	write func(ctx context.Context, msgs []*outbox.Message) error

	written   atomic.Int64 // messages committed
	acked     atomic.Int64 // messages acknowledged
	violation atomic.Int64 // messages claimed out of order

	mu        sync.Mutex
	published map[string]int // aggregate -> last seq published
}

// writer is writer w: it commits txPerWriter transactions of one to three
// messages of one of its aggregates, each aggregate's in sequence.
func (c *checker) writer(ctx context.Context, w int) {
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	seq := map[string]int{}
	for range txPerWriter {
		agg := fmt.Sprintf("w%d-%d", w, rng.IntN(aggsPerWriter))
		var msgs []*outbox.Message
		for range 1 + rng.IntN(3) {
			seq[agg]++
			msgs = append(msgs, &outbox.Message{AggregateType: "order", AggregateID: agg, EventType: "E",
				Payload: []byte(strconv.Itoa(seq[agg]))})
		}
		if err := c.write(ctx, msgs); err != nil {
			c.t.Error(err)
			return
		}
		c.written.Add(int64(len(msgs)))
	}
}

// claimer is claimer id: it claims, checks the order, "publishes" and
// acknowledges until the writers are done and everything written is
// acknowledged, or ctx ends.
func (c *checker) claimer(ctx context.Context, id int, writersDone <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(id), 11))
	for ctx.Err() == nil {
		select {
		case <-writersDone:
			if c.acked.Load() == c.written.Load() {
				return
			}
		default:
		}
		cl, err := c.s.Claim(ctx, outbox.ClaimParams{Limit: 1 + rng.IntN(12), Lease: time.Hour, Ordered: true, BlockOnDead: true})
		if err != nil {
			if ctx.Err() == nil {
				c.t.Error(err)
			}
			return
		}
		c.checkOrder(cl.Messages)
		if len(cl.Messages) > 0 {
			time.Sleep(time.Duration(1+rng.IntN(3)) * time.Millisecond) // at the broker
			c.confirm(cl.Messages)
			n, err := c.s.Ack(ctx, outbox.AckParams{Messages: cl.Messages})
			if err != nil {
				c.t.Error(err)
				return
			}
			c.acked.Add(int64(n))
		}
	}
}

// checkOrder counts a violation for each claimed message that follows
// neither the last one the broker confirmed of its aggregate nor its
// predecessor in this claim.
func (c *checker) checkOrder(msgs []*outbox.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := map[string]int{}
	for _, m := range msgs {
		n, _ := strconv.Atoi(string(m.Payload))
		if _, ok := next[m.AggregateID]; !ok {
			next[m.AggregateID] = c.published[m.AggregateID] + 1
		}
		if n != next[m.AggregateID] {
			c.violation.Add(1)
		}
		next[m.AggregateID] = n + 1
	}
}

// confirm records msgs as confirmed by the broker.
func (c *checker) confirm(msgs []*outbox.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		n, _ := strconv.Atoi(string(m.Payload))
		c.published[m.AggregateID] = max(c.published[m.AggregateID], n)
	}
}

// SQLWrite returns a write function for [Violations] that commits each
// batch of messages in a transaction of its own on db, through w.
func SQLWrite(db *sql.DB, w *outbox.Writer[*sql.Tx]) func(ctx context.Context, msgs []*outbox.Message) error {
	return func(ctx context.Context, msgs []*outbox.Message) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if err := w.Write(ctx, tx, msgs...); err != nil {
			return err
		}
		return tx.Commit()
	}
}

// BothTables runs f, in parallel subtests, on a store of a migrated table
// and on one of a table with only the contract's indexes, opened by the
// functions given.
func BothTables[S any](t *testing.T, migrated, contract func(*testing.T) (S, *sql.DB), f func(t *testing.T, s S, db *sql.DB)) {
	t.Helper()
	for _, tc := range []struct {
		name string
		open func(*testing.T) (S, *sql.DB)
	}{{"Migrated", migrated}, {"Contract", contract}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, db := tc.open(t)
			f(t, s, db)
		})
	}
}

// ClaimChained makes an ordered claim of up to limit rows on s (BlockOnDead,
// a lease of an hour) naming chain in ClaimParams.Chain, and returns what it
// handed out, as "aggregate#payload", and the messages.
func ClaimChained(t *testing.T, s outbox.Store, limit int, chain ...*outbox.Message) ([]string, []*outbox.Message) {
	t.Helper()
	var ids []int64
	for _, m := range chain {
		ids = append(ids, m.RowID)
	}
	c, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: limit, Lease: time.Hour, Ordered: true,
		BlockOnDead: true, Chain: ids})
	require.NoError(t, err)
	var got []string
	for _, m := range c.Messages {
		got = append(got, fmt.Sprintf("%s#%s", m.AggregateID, m.Payload))
	}
	return got, c.Messages
}
