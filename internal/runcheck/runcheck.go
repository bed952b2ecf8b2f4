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
// a message is claimed again only after it died and came back) until
// everything written is acknowledged. A claimer checks that each message
// it claimed is the one after the last one the broker confirmed of its
// aggregate (or after its predecessor in the same claim), "publishes" them
// (a short wait, then they count as confirmed), then acknowledges them.
// A claim that handed out row k+1 of an aggregate while row k was pending
// or dead outside it counts as a violation, unless row k was confirmed
// meanwhile: a store that breaks the rule shows some in most runs, not in
// every one.
//
// When s is also an [outbox.Admin], rows die and come back while the
// claimers work, as they do when a relay gives up on a message and an
// operator retries it: a claimer kills about one claim in three instead of
// publishing its first message (and that message's successors in the
// claim, which must not go out before it), at most four times per message,
// and an operator retries every dead row about every half millisecond
// (RetryDead). A kill or a retry moves a row between statuses, and so
// between the ranges of an index that leads with the status; a read of
// runs that misses the row in flight lets its successors out. That race
// is narrower than the others: MariaDB claims that read their runs at READ
// UNCOMMITTED failed about one run in ten on a migrated table, and twelve
// in twenty on one with the contract's indexes (where leases move rows
// too).
//
// It fails t if the claimers cannot drain the table within two minutes.
func Violations(t *testing.T, s outbox.Store, write func(ctx context.Context, msgs []*outbox.Message) error) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := &checker{t: t, s: s, write: write, published: map[string]int{}, kills: map[string]int{}}
	var wg, writing sync.WaitGroup
	for w := range writers {
		writing.Go(func() { c.writer(ctx, w) })
	}
	writersDone := make(chan struct{})
	go func() { writing.Wait(); close(writersDone) }()
	for id := range claimers {
		wg.Go(func() { c.claimer(ctx, id, writersDone) })
	}
	if admin, ok := s.(outbox.Admin); ok {
		c.killing = true
		wg.Go(func() { c.operator(ctx, admin, writersDone) })
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "the claimers did not drain the table in time")
	require.Equal(t, c.written.Load(), c.acked.Load())
	if c.killing {
		t.Logf("%d messages written, %d kills, %d retries", c.written.Load(), c.killed.Load(), c.retried.Load())
		require.Positive(t, c.killed.Load(), "no message died: the run did not test kills")
		require.Equal(t, c.killed.Load(), c.retried.Load(), "every dead message came back")
	}
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
	killing   bool         // claimers kill messages and an operator retries them
	killed    atomic.Int64 // messages killed
	retried   atomic.Int64 // dead messages put back to pending

	mu        sync.Mutex
	published map[string]int // aggregate -> last seq published
	kills     map[string]int // message id -> times killed
}

// done reports whether the writers are done and everything written is
// acknowledged.
func (c *checker) done(writersDone <-chan struct{}) bool {
	select {
	case <-writersDone:
		return c.acked.Load() == c.written.Load()
	default:
		return false
	}
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
	for ctx.Err() == nil && !c.done(writersDone) {
		cl, err := c.s.Claim(ctx, outbox.ClaimParams{Limit: 1 + rng.IntN(12), Lease: time.Hour, Ordered: true, BlockOnDead: true})
		if err != nil {
			if ctx.Err() == nil {
				c.t.Error(err)
			}
			return
		}
		c.checkOrder(cl.Messages)
		if len(cl.Messages) == 0 {
			continue
		}
		sent, dead := c.pickDead(rng, cl.Messages)
		if len(dead) > 0 {
			if err := c.s.Kill(ctx, outbox.KillParams{Dead: dead}); err != nil {
				c.t.Error(err)
				return
			}
			c.killed.Add(int64(len(dead)))
		}
		if len(sent) == 0 {
			continue
		}
		time.Sleep(time.Duration(1+rng.IntN(3)) * time.Millisecond) // at the broker
		c.confirm(sent)
		n, err := c.s.Ack(ctx, outbox.AckParams{Messages: sent})
		if err != nil {
			c.t.Error(err)
			return
		}
		c.acked.Add(int64(n))
	}
}

// pickDead splits a claim into the messages to publish and those to kill:
// in about one claim in three (when the checker kills), its first message,
// unless it died four times already, and the messages of its aggregate
// after it.
func (c *checker) pickDead(rng *rand.Rand, msgs []*outbox.Message) (sent []*outbox.Message, dead []outbox.Dead) {
	victim := ""
	if c.killing && rng.IntN(3) == 0 {
		c.mu.Lock()
		if c.kills[msgs[0].MessageID] < 4 {
			c.kills[msgs[0].MessageID]++
			victim = msgs[0].AggregateID
		}
		c.mu.Unlock()
	}
	for _, m := range msgs {
		if m.AggregateID == victim {
			dead = append(dead, outbox.Dead{Message: m, Reason: "runcheck: killed"})
			continue
		}
		sent = append(sent, m)
	}
	return sent, dead
}

// operator puts every dead message back to pending about every half
// millisecond until the claimers are done.
func (c *checker) operator(ctx context.Context, admin outbox.Admin, writersDone <-chan struct{}) {
	rng := rand.New(rand.NewPCG(5, 13))
	for ctx.Err() == nil && !c.done(writersDone) {
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
		n, err := admin.RetryDead(ctx, outbox.DeadFilter{})
		if err != nil {
			if ctx.Err() == nil {
				c.t.Error(err)
			}
			return
		}
		c.retried.Add(n)
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
