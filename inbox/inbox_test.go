package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/stretchr/testify/require"
)

// TestProcessExactlyOnce delivers every message 2 to 10 times at once, through
// three consumer instances (each with its own connection pool), while the
// handler fails the first run of every fifth message: each message's effect
// must happen exactly once.
func TestProcessExactlyOnce(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			tdb := newTestDB(t, d)
			var tl tally
			const instances, messages = 3, 40
			ins := make([]*inbox.Inbox, instances)
			for i := range ins {
				ins[i] = newInbox(t, tdb.open(), d, inbox.WithConsumer("shipping"), inbox.WithHooks(&tl))
			}
			var failOnce sync.Map // message id -> struct{}: the first run of these fails
			var injected atomic.Int64
			boom := errors.New("boom")

			ctx := context.Background()
			var wg sync.WaitGroup
			deliveries := 0
			for m := range messages {
				id := fmt.Sprintf("msg-%03d", m)
				copies := 2 + m%9
				deliveries += copies
				start := make(chan struct{})
				for c := range copies {
					instance := (m + c) % instances
					h := tdb.effectHandler(instance)
					wg.Go(func() {
						<-start
						for { // a failed delivery is delivered again, as a broker would
							_, err := ins[instance].Process(ctx, message(id), func(ctx context.Context, tx *sql.Tx, msg *outbox.Message) error {
								if err := h(ctx, tx, msg); err != nil {
									return err
								}
								if m%5 == 0 {
									if _, loaded := failOnce.LoadOrStore(id, struct{}{}); !loaded {
										injected.Add(1)
										return boom
									}
								}
								return nil
							})
							if err == nil {
								return
							}
							if !errors.Is(err, boom) {
								t.Errorf("process %s: %v", id, err)
								return
							}
						}
					})
				}
				close(start)
			}
			wg.Wait()

			effects := tdb.effects(t)
			require.Len(t, effects, messages)
			for id, n := range effects {
				require.Equal(t, 1, n, "effects of %s", id)
			}
			require.Equal(t, int64(messages/5), injected.Load())
			require.Equal(t, int64(messages), tl.processed.Load())
			require.Equal(t, int64(deliveries-messages), tl.duplicate.Load())
			require.Equal(t, injected.Load(), tl.failed.Load())
			require.Equal(t, messages, tdb.inboxRows(t, "shipping"))
		})
	}
}

// TestHandlerFailureRecordsNothing: a failing handler leaves neither the
// inbox row nor its own writes; the redelivery then processes the message
// once, and later copies are duplicates.
func TestHandlerFailureRecordsNothing(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			tdb := newTestDB(t, d)
			in := newInbox(t, tdb.db, d, inbox.WithConsumer("billing"))
			ctx := context.Background()
			msg := message("m-1")
			boom := errors.New("payment provider said no")
			effect := tdb.effectHandler(1)

			out, err := in.Process(ctx, msg, func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
				require.NoError(t, effect(ctx, tx, m)) // written, then rolled back
				return boom
			})
			require.ErrorIs(t, err, boom)
			var he *inbox.HandlerError
			require.ErrorAs(t, err, &he)
			require.Zero(t, out)
			require.Zero(t, tdb.inboxRows(t, "billing"))
			require.Empty(t, tdb.effects(t))

			out, err = in.Process(ctx, msg, effect)
			require.NoError(t, err)
			require.Equal(t, inbox.Processed, out)

			ran := false
			out, err = in.Process(ctx, msg, func(context.Context, *sql.Tx, *outbox.Message) error { ran = true; return nil })
			require.NoError(t, err)
			require.Equal(t, inbox.Duplicate, out)
			require.False(t, ran, "the handler ran for a duplicate")
			require.Equal(t, map[string]int{"m-1": 1}, tdb.effects(t))
			require.Equal(t, 1, tdb.inboxRows(t, "billing"))
		})
	}
}

// TestConsumersAreIndependent: two consumer names on one table each process
// every message once.
func TestConsumersAreIndependent(t *testing.T) {
	t.Parallel()
	tdb := newTestDB(t, inbox.SQLite)
	ctx := context.Background()
	for i, name := range []string{"shipping", "billing"} {
		in := newInbox(t, tdb.db, inbox.SQLite, inbox.WithConsumer(name))
		for range 2 {
			_, err := in.Process(ctx, message("m-1"), tdb.effectHandler(i))
			require.NoError(t, err)
		}
	}
	require.Equal(t, map[string]int{"m-1": 2}, tdb.effects(t))
	require.Equal(t, 1, tdb.inboxRows(t, "shipping"))
	require.Equal(t, 1, tdb.inboxRows(t, "billing"))
}

// TestProcessRefusesUnusableIDs: without an id a message cannot be
// deduplicated; it is refused as permanent and the handler never runs.
func TestProcessRefusesUnusableIDs(t *testing.T) {
	t.Parallel()
	tdb := newTestDB(t, inbox.SQLite)
	in := newInbox(t, tdb.db, inbox.SQLite)
	for _, tc := range []struct {
		name string
		msg  *outbox.Message
	}{
		{"Nil", nil},
		{"Empty", message("")},
		{"TooLong", message(strings.Repeat("x", inbox.MaxMessageIDLength+1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := in.Process(context.Background(), tc.msg, func(context.Context, *sql.Tx, *outbox.Message) error {
				t.Fatal("handler ran")
				return nil
			})
			require.ErrorIs(t, err, inbox.ErrNoMessageID)
			require.True(t, outbox.IsPermanent(err))
			require.Zero(t, out)
		})
	}
	// The longest allowed id fits the column in every database (checked by the per-dialect tests' ids).
	out, err := in.Process(context.Background(), message(strings.Repeat("x", inbox.MaxMessageIDLength)), tdb.effectHandler(0))
	require.NoError(t, err)
	require.Equal(t, inbox.Processed, out)
}

// TestLongIDsAndCase: ids that differ only in case or trailing space are
// different messages in every database (MySQL collations would fold them).
func TestLongIDsAndCase(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			tdb := newTestDB(t, d)
			in := newInbox(t, tdb.db, d)
			long := strings.Repeat("é", inbox.MaxMessageIDLength/2) // 254 bytes
			for _, id := range []string{"01ARZ3NDEK", "01arz3ndek", "01ARZ3NDEK ", long} {
				out, err := in.Process(context.Background(), message(id), tdb.effectHandler(0))
				require.NoError(t, err, "id %q", id)
				require.Equal(t, inbox.Processed, out, "id %q", id)
			}
			require.Len(t, tdb.effects(t), 4)
			require.Equal(t, 4, tdb.inboxRows(t, inbox.DefaultConsumer))
		})
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", ":memory:")
	require.NoError(t, err)
	defer db.Close()
	for _, tc := range []struct {
		name    string
		dialect inbox.Dialect
		opts    []inbox.Option
		wantErr string // "" = valid
	}{
		{"Defaults", inbox.Postgres, nil, ""},
		{"SchemaQualified", inbox.MySQL, []inbox.Option{inbox.WithTable("app.inbox")}, ""},
		{"UnknownDialect", "oracle", nil, `unknown dialect "oracle"`},
		{"InjectionInTable", inbox.Postgres, []inbox.Option{inbox.WithTable(`x"; DROP TABLE y; --`)}, "WithTable"},
		{"QuoteInTable", inbox.MySQL, []inbox.Option{inbox.WithTable("in`box")}, "WithTable"},
		{"ThreePartTable", inbox.Postgres, []inbox.Option{inbox.WithTable("a.b.c")}, "WithTable"},
		{"EmptyTable", inbox.SQLite, []inbox.Option{inbox.WithTable("")}, "WithTable"},
		{"TooLongTable", inbox.SQLite, []inbox.Option{inbox.WithTable(strings.Repeat("t", 49))}, "WithTable"},
		{"EmptyConsumer", inbox.SQLite, []inbox.Option{inbox.WithConsumer("")}, "WithConsumer"},
		{"LongConsumer", inbox.SQLite, []inbox.Option{inbox.WithConsumer(strings.Repeat("c", 65))}, "WithConsumer"},
		{"ZeroRetention", inbox.SQLite, []inbox.Option{inbox.WithRetention(0)}, "WithRetention"},
		{"ZeroBatch", inbox.SQLite, []inbox.Option{inbox.WithPurgeBatchSize(0)}, "WithPurgeBatchSize"},
		{"ZeroFilterTimeout", inbox.SQLite, []inbox.Option{inbox.WithFilterTimeout(0)}, "WithFilterTimeout"},
		{"NilLogger", inbox.SQLite, []inbox.Option{inbox.WithLogger(nil)}, "WithLogger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := inbox.New(db, tc.dialect, tc.opts...)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	t.Run("ReportsEveryProblem", func(t *testing.T) {
		_, err := inbox.New(db, inbox.SQLite, inbox.WithTable("a-b"), inbox.WithRetention(-1))
		require.ErrorContains(t, err, "WithTable")
		require.ErrorContains(t, err, "WithRetention")
	})
}

// TestMigrate: concurrent and repeated migrations succeed, on a custom table.
func TestMigrate(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			tdb := newTestDB(t, d)
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for range 4 {
				wg.Go(func() {
					in, err := inbox.New(tdb.open(), d, inbox.WithTable("order_inbox"))
					if err == nil {
						err = in.Migrate(context.Background())
					}
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			in := newInbox(t, tdb.db, d, inbox.WithTable("order_inbox")) // and once more
			schema, err := in.Schema()
			require.NoError(t, err)
			require.Len(t, schema, map[inbox.Dialect]int{inbox.Postgres: 3, inbox.MySQL: 2, inbox.SQLite: 3}[d])
			for _, stmt := range schema { // what Migrate ran, so running it again changes nothing
				require.Contains(t, stmt, "IF NOT EXISTS")
				require.Contains(t, stmt, "order_inbox")
				_, err := tdb.db.Exec(stmt)
				require.NoError(t, err)
			}
			out, err := in.Process(context.Background(), message("m"), tdb.effectHandler(0))
			require.NoError(t, err)
			require.Equal(t, inbox.Processed, out)
			var n int
			require.NoError(t, tdb.db.QueryRow("SELECT COUNT(*) FROM order_inbox").Scan(&n))
			require.Equal(t, 1, n)
		})
	}
}

// TestPurge deletes only the consumer's rows older than the retention, in
// batches; a copy that arrives after its row was purged is processed again.
func TestPurge(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			tdb := newTestDB(t, d)
			var now atomic.Pointer[time.Time]
			t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			now.Store(&t0)
			clock := inbox.WithClock(func() time.Time { return *now.Load() })
			const retention = 24 * time.Hour
			a := newInbox(t, tdb.db, d, inbox.WithConsumer("a"), inbox.WithRetention(retention), inbox.WithPurgeBatchSize(3), clock)
			b := newInbox(t, tdb.db, d, inbox.WithConsumer("b"), inbox.WithRetention(retention), clock)
			ctx := context.Background()
			process := func(in *inbox.Inbox, id string) inbox.Outcome {
				out, err := in.Process(ctx, message(id), func(context.Context, *sql.Tx, *outbox.Message) error { return nil })
				require.NoError(t, err)
				return out
			}
			for i := range 10 {
				process(a, fmt.Sprintf("old-%d", i))
				process(b, fmt.Sprintf("old-%d", i))
			}
			later := t0.Add(retention) // exactly at the cutoff later on: kept
			now.Store(&later)
			process(a, "new-1")
			process(a, "new-2")

			purgeAt := t0.Add(retention + time.Minute)
			now.Store(&purgeAt)
			n, err := a.Purge(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(10), n)
			require.Equal(t, 2, tdb.inboxRows(t, "a"))
			require.Equal(t, 10, tdb.inboxRows(t, "b"), "another consumer's rows were purged")

			n, err = a.Purge(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
			require.Equal(t, inbox.Duplicate, process(a, "new-1"))
			require.Equal(t, inbox.Processed, process(a, "old-1"), "retention bounds deduplication")
		})
	}
}

// TestRunPurge stops with its context.
func TestRunPurge(t *testing.T) {
	t.Parallel()
	tdb := newTestDB(t, inbox.SQLite)
	in := newInbox(t, tdb.db, inbox.SQLite)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.RunPurge(ctx, time.Hour) }()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("RunPurge did not stop")
	}
	require.Error(t, in.RunPurge(context.Background(), 0))
}

// TestAdvanceSeq applies an aggregate's messages only in order.
func TestAdvanceSeq(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			tdb := newTestDB(t, d)
			in := newInbox(t, tdb.db, d)
			ctx := context.Background()
			for i, step := range []struct {
				aggregate string
				seq       int64
				applied   bool
				gap       bool  // want a *SeqGapError
				last      int64 // its Last
			}{
				{aggregate: "order-1", seq: 2, gap: true, last: 0}, // the first message is missing
				{aggregate: "order-1", seq: 1, applied: true},
				{aggregate: "order-2", seq: 1, applied: true}, // aggregates are independent
				{aggregate: "order-1", seq: 3, gap: true, last: 1},
				{aggregate: "order-1", seq: 2, applied: true},
				{aggregate: "order-1", seq: 3, applied: true},
				{aggregate: "order-1", seq: 2}, // a stale copy under a new message id
				{aggregate: "order-1", seq: 1},
			} {
				var applied bool
				_, err := in.Process(ctx, message(fmt.Sprintf("m-%d", i)), func(ctx context.Context, tx *sql.Tx, _ *outbox.Message) error {
					var err error
					applied, err = in.AdvanceSeq(ctx, tx, step.aggregate, step.seq)
					return err
				})
				if step.gap {
					var gap *inbox.SeqGapError
					require.ErrorAs(t, err, &gap, "step %d", i)
					require.ErrorIs(t, err, inbox.ErrSeqGap)
					require.Equal(t, step.last, gap.Last, "step %d", i)
					require.Equal(t, step.seq, gap.Got)
					continue
				}
				require.NoError(t, err, "step %d", i)
				require.Equal(t, step.applied, applied, "step %d", i)
			}
		})
	}
}

// TestAdvanceSeqConcurrent: many consumers racing over one aggregate's
// messages, delivered out of order, apply them in order.
func TestAdvanceSeqConcurrent(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			tdb := newTestDB(t, d)
			in := newInbox(t, tdb.db, d)
			ctx := context.Background()
			const n = 12
			var mu sync.Mutex
			var order []int64
			var wg sync.WaitGroup
			for seq := int64(n); seq >= 1; seq-- { // newest first: most arrive early
				wg.Go(func() {
					for {
						_, err := in.Process(ctx, message(fmt.Sprintf("s-%d", seq)), func(ctx context.Context, tx *sql.Tx, _ *outbox.Message) error {
							ok, err := in.AdvanceSeq(ctx, tx, "order-1", seq)
							if err == nil && ok {
								mu.Lock()
								order = append(order, seq)
								mu.Unlock()
							}
							return err
						})
						if err == nil {
							return
						}
						// A gap or a lock conflict: delivered again, as a broker would.
					}
				})
			}
			wg.Wait()
			require.Len(t, order, n)
			for i, seq := range order {
				require.Equal(t, int64(i+1), seq)
			}
		})
	}
}
