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
	const writers, aggsPerWriter, txPerWriter, claimers = 3, 6, 60, 4
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var (
		mu        sync.Mutex
		published = map[string]int{} // aggregate -> last seq published
		written   atomic.Int64
		acked     atomic.Int64
		violation atomic.Int64
		wg        sync.WaitGroup
		writing   sync.WaitGroup
	)
	for w := range writers {
		writing.Go(func() {
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
				if err := write(ctx, msgs); err != nil {
					t.Error(err)
					return
				}
				written.Add(int64(len(msgs)))
			}
		})
	}
	writersDone := make(chan struct{})
	go func() { writing.Wait(); close(writersDone) }()
	for c := range claimers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			for ctx.Err() == nil {
				select {
				case <-writersDone:
					if acked.Load() == written.Load() {
						return
					}
				default:
				}
				cl, err := s.Claim(ctx, outbox.ClaimParams{Limit: 1 + rng.IntN(12), Lease: time.Hour, Ordered: true, BlockOnDead: true})
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				// Each message must follow the last one the broker confirmed
				// of its aggregate, or its predecessor in this claim.
				mu.Lock()
				next := map[string]int{}
				for _, m := range cl.Messages {
					n, _ := strconv.Atoi(string(m.Payload))
					if _, ok := next[m.AggregateID]; !ok {
						next[m.AggregateID] = published[m.AggregateID] + 1
					}
					if n != next[m.AggregateID] {
						violation.Add(1)
					}
					next[m.AggregateID] = n + 1
				}
				mu.Unlock()
				if len(cl.Messages) > 0 {
					time.Sleep(time.Duration(1+rng.IntN(3)) * time.Millisecond) // at the broker
					mu.Lock()
					for _, m := range cl.Messages {
						n, _ := strconv.Atoi(string(m.Payload))
						published[m.AggregateID] = max(published[m.AggregateID], n)
					}
					mu.Unlock()
					n, err := s.Ack(ctx, outbox.AckParams{Messages: cl.Messages})
					if err != nil {
						t.Error(err)
						return
					}
					acked.Add(int64(n))
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "the claimers did not drain the table in time")
	require.Equal(t, written.Load(), acked.Load())
	return int(violation.Load())
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
