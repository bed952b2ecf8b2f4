package mysqlstore

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

// contractStore returns a Store on a table of the test's own with only the
// contract's columns and indexes (the seed's DDL).
func contractStore(t *testing.T) (*Store, *sql.DB) {
	t.Helper()
	db := testDB(t)
	_, err := db.Exec(`CREATE TABLE outbox_message (
		id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(64) NOT NULL UNIQUE,
		aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL,
		payload JSON NOT NULL, status TINYINT NOT NULL DEFAULT 0, retry_count INT NOT NULL DEFAULT 0,
		next_retry_at DATETIME(6) NULL, created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
		updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
		INDEX (status, next_retry_at), INDEX (aggregate_type, aggregate_id)) ENGINE = InnoDB`)
	require.NoError(t, err)
	s, err := New(db)
	require.NoError(t, err)
	return s, db
}

// bothTables runs f on a migrated table and on one with only the contract's indexes.
func bothTables(t *testing.T, f func(t *testing.T, s *Store, db *sql.DB)) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (*Store, *sql.DB)
	}{{"Migrated", orderedStore}, {"Contract", contractStore}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, db := tc.open(t)
			f(t, s, db)
		})
	}
}

// TestRunsClaim checks what ends a run: nothing, when nothing blocks; a row
// leased by another claim, locked by a concurrent claim, waiting out a
// backoff, or dead under BlockOnDead; and the limit, which cuts runs by id.
func TestRunsClaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		blockOnDead bool
		limit       int
		// block does something to a#0 (id ids[0]) and a#1 before the claim;
		// it may return a function that undoes it after the claim.
		block func(t *testing.T, s *Store, db *sql.DB, a []*outbox.Message) func()
		want  []string
	}{
		{name: "NothingBlocks", limit: 10, want: []string{"a#0", "b#0", "a#1", "b#1", "a#2", "c#0"}},
		{name: "LimitCutsByID", limit: 4, want: []string{"a#0", "b#0", "a#1", "b#1"}},
		{name: "Acknowledged", limit: 10, want: []string{"b#0", "a#1", "b#1", "a#2", "c#0"},
			block: func(t *testing.T, s *Store, _ *sql.DB, a []*outbox.Message) func() {
				_, err := s.Ack(t.Context(), outbox.AckParams{Messages: a[:1]})
				require.NoError(t, err)
				return nil
			}},
		{name: "Leased", limit: 10, want: []string{"b#0", "b#1", "c#0"},
			block: func(*testing.T, *Store, *sql.DB, []*outbox.Message) func() { return nil }}, // a#0 stays leased
		{name: "Backoff", limit: 10, want: []string{"b#0", "b#1", "c#0"},
			block: func(t *testing.T, s *Store, _ *sql.DB, a []*outbox.Message) func() {
				reschedule(t, s, a[0], time.Now().Add(time.Hour))
				return nil
			}},
		{name: "DeadBlocks", blockOnDead: true, limit: 10, want: []string{"b#0", "b#1", "c#0"},
			block: func(t *testing.T, s *Store, _ *sql.DB, a []*outbox.Message) func() {
				require.NoError(t, s.Kill(t.Context(), outbox.KillParams{Dead: []outbox.Dead{{Message: a[0], Reason: "poison"}}}))
				return nil
			}},
		{name: "DeadSkipped", limit: 10, want: []string{"b#0", "a#1", "b#1", "a#2", "c#0"},
			block: func(t *testing.T, s *Store, _ *sql.DB, a []*outbox.Message) func() {
				require.NoError(t, s.Kill(t.Context(), outbox.KillParams{Dead: []outbox.Dead{{Message: a[0], Reason: "poison"}}}))
				return nil
			}},
		{name: "LockedByAConcurrentClaim", limit: 10, want: []string{"a#0", "b#0", "b#1", "c#0"},
			block: func(t *testing.T, s *Store, db *sql.DB, a []*outbox.Message) func() {
				reschedule(t, s, a[0], time.Now().Add(-time.Minute)) // due again
				tx, err := db.BeginTx(t.Context(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
				require.NoError(t, err)
				var id int64
				require.NoError(t, tx.QueryRowContext(t.Context(), "SELECT id FROM outbox_message WHERE message_id = 'a-1' FOR UPDATE").Scan(&id))
				return func() { require.NoError(t, tx.Rollback()) }
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bothTables(t, func(t *testing.T, s *Store, db *sql.DB) {
				writeRows(t, s, db, "a#0", "b#0", "a#1", "b#1", "a#2", "c#0")
				if tc.block != nil {
					_, a := claimOrdered(t, s, 1, tc.blockOnDead) // a#0, leased
					if undo := tc.block(t, s, db, a); undo != nil {
						defer undo()
					}
				}
				got, _ := claimOrdered(t, s, tc.limit, tc.blockOnDead)
				require.Equal(t, tc.want, got)
			})
		})
	}
}

// reschedule makes m due at at.
func reschedule(t *testing.T, s *Store, m *outbox.Message, at time.Time) {
	t.Helper()
	require.NoError(t, s.Reschedule(t.Context(), outbox.RescheduleParams{Retries: []outbox.Retry{{Message: m, At: at}}}))
}

// writeRows commits one message per "agg#n", in one transaction, in order.
func writeRows(t *testing.T, s *Store, db *sql.DB, rows ...string) {
	t.Helper()
	var msgs []*outbox.Message
	for _, r := range rows {
		var agg, n string
		for i := range r {
			if r[i] == '#' {
				agg, n = r[:i], r[i+1:]
			}
		}
		msgs = append(msgs, &outbox.Message{MessageID: agg + "-" + n, AggregateType: "order", AggregateID: agg,
			EventType: "E", Payload: []byte(n)})
	}
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter[*sql.Tx](s).Write(t.Context(), tx, msgs...))
	require.NoError(t, tx.Commit())
}

// TestRunsClaimConcurrent runs claimers side by side while writers commit
// messages, one to three per transaction, each writer to aggregates of its
// own in sequence. A claimer "publishes" what it claimed, in id order,
// checking that each message is the one after the last published of its
// aggregate, then acknowledges it. A claim that handed out row k+1 of an
// aggregate while row k was pending outside it shows as a message published
// before its predecessor (or a gap); none must show. Leases are long, so
// every message is claimed once.
func TestRunsClaimConcurrent(t *testing.T) {
	t.Parallel()
	bothTables(t, func(t *testing.T, s *Store, db *sql.DB) {
		require.Zero(t, runConcurrent(t, s, db), "messages published before their predecessor")
	})
}

// runConcurrent runs the writers and claimers of TestRunsClaimConcurrent and
// returns the violations it saw.
func runConcurrent(t *testing.T, s *Store, db *sql.DB) int {
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
			wr := outbox.NewWriter[*sql.Tx](s)
			for range txPerWriter {
				agg := fmt.Sprintf("w%d-%d", w, rng.IntN(aggsPerWriter))
				var msgs []*outbox.Message
				for range 1 + rng.IntN(3) {
					seq[agg]++
					msgs = append(msgs, &outbox.Message{MessageID: fmt.Sprintf("%s-%d", agg, seq[agg]), AggregateType: "order",
						AggregateID: agg, EventType: "E", Payload: []byte(strconv.Itoa(seq[agg]))})
				}
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if err := wr.Write(ctx, tx, msgs...); err != nil {
					tx.Rollback() //nolint:errcheck
					t.Error(err)
					return
				}
				if err := tx.Commit(); err != nil {
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
				mu.Lock()
				for _, m := range cl.Messages {
					n, _ := strconv.Atoi(string(m.Payload))
					if n != published[m.AggregateID]+1 {
						violation.Add(1)
					}
					published[m.AggregateID] = max(published[m.AggregateID], n)
				}
				mu.Unlock()
				if len(cl.Messages) > 0 {
					time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond) // at the broker
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
