package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
)

const benchBatch = 100

// BenchmarkClaimAck measures one relay cycle without the broker: claim 100
// rows, then acknowledge them, keeping the rows as sent or deleting them.
//
// Lease is the Store's default shape: the claim commits on its own (attempt
// counted, lease set), the ack is a second fenced statement. Held is
// WithHeldClaims: BEGIN and SELECT ... FOR UPDATE SKIP LOCKED in one round
// trip, then the acknowledgement and COMMIT in a second (HeldClaim.Settle),
// with the rows locked and a connection held in between (while a relay
// would publish). Each runs with the server's synchronous_commit and with
// synchronous_commit = off on the relay's sessions (a commit lost in a
// database crash then means a duplicate or an uncounted attempt, never a lost
// message). All report rows/s.
//
//	go test -run '^$' -bench ClaimAck -benchtime 200x ./store/pgstore
func BenchmarkClaimAck(b *testing.B) {
	for _, commit := range []string{"SyncCommit", "AsyncCommit"} {
		for _, del := range []bool{false, true} {
			mode := map[bool]string{false: "Keep", true: "Delete"}[del]
			b.Run("Lease/"+mode+"/"+commit, func(b *testing.B) {
				_, s := benchTable(b, commit == "AsyncCommit")
				ctx := context.Background()
				b.ResetTimer()
				for range b.N {
					c, err := s.Claim(ctx, outbox.ClaimParams{Limit: benchBatch, Lease: time.Minute})
					if err != nil || len(c.Messages) != benchBatch {
						b.Fatalf("claim: %d rows, %v", len(c.Messages), err)
					}
					n, err := s.Ack(ctx, outbox.AckParams{Messages: c.Messages, Delete: del})
					if err != nil || n != benchBatch {
						b.Fatalf("ack: %d rows, %v", n, err)
					}
				}
				b.StopTimer()
				reportRows(b)
			})
			b.Run("Held/"+mode+"/"+commit, func(b *testing.B) {
				_, s := benchTable(b, commit == "AsyncCommit", pgstore.WithHeldClaims(true))
				ctx := context.Background()
				b.ResetTimer()
				for range b.N {
					c, err := s.Claim(ctx, outbox.ClaimParams{Limit: benchBatch, Lease: time.Minute, Delete: del})
					if err != nil || len(c.Messages) != benchBatch || c.Held == nil {
						b.Fatalf("claim: %d rows, %v", len(c.Messages), err)
					}
					// ... the relay would publish here, holding the locks ...
					n, err := c.Held.Settle(ctx, outbox.SettleParams{Sent: c.Messages})
					if err != nil || n != benchBatch {
						b.Fatalf("settle: %d rows, %v", n, err)
					}
				}
				b.StopTimer()
				reportRows(b)
			})
		}
	}
}

// BenchmarkOrderedClaimChained measures the ordered claim of one relay with
// batches in flight over few aggregates: 100 aggregates, claims of 100 rows,
// four batches in flight named in ClaimParams.Chain, so that each claim
// takes the next message of every aggregate, behind the four of it in
// flight. Before each claim the oldest batch is acknowledged, untimed. This
// is the shape where the ordered claim's read of the rows in flight costs
// most against the unordered claim (Unordered: the same loop without
// ordering); docs/ordering.md ("What is left") has the figures.
//
//	go test -run '^$' -bench OrderedClaimChained -benchtime 400x -count 6 ./store/pgstore
func BenchmarkOrderedClaimChained(b *testing.B) {
	const inFlight, aggregates = 4, 100
	for _, ordered := range []bool{true, false} {
		b.Run(map[bool]string{true: "Ordered", false: "Unordered"}[ordered], func(b *testing.B) {
			_, s := benchRows(b, false, (b.N+inFlight)*benchBatch, aggregates)
			ctx := context.Background()
			var flight [][]*outbox.Message
			claim := func() {
				var chain []int64
				for _, batch := range flight {
					for _, m := range batch {
						chain = append(chain, m.RowID)
					}
				}
				c, err := s.Claim(ctx, outbox.ClaimParams{Limit: benchBatch, Lease: time.Minute, Ordered: ordered,
					BlockOnDead: true, Chain: chain})
				if err != nil {
					b.Fatal(err)
				}
				if len(c.Messages) != benchBatch {
					b.Fatalf("claim: %d rows, want %d", len(c.Messages), benchBatch)
				}
				flight = append(flight, c.Messages)
			}
			for range inFlight {
				claim()
			}
			b.ResetTimer()
			for range b.N {
				b.StopTimer() // the claim alone is timed
				if _, err := s.Ack(ctx, outbox.AckParams{Messages: flight[0]}); err != nil {
					b.Fatal(err)
				}
				flight = flight[1:]
				b.StartTimer()
				claim()
			}
			b.StopTimer()
			reportRows(b)
		})
	}
}

// benchTable returns a migrated table holding b.N batches of pending rows,
// a pool on it whose sessions commit asynchronously when async, and a Store
// with opts.
func benchTable(b *testing.B, async bool, opts ...pgstore.Option) (*pgxpool.Pool, *pgstore.Store) {
	return benchRows(b, async, b.N*benchBatch, 0, opts...)
}

// benchRows is benchTable with total rows spread round-robin over
// aggregates (0: one aggregate per row).
func benchRows(b *testing.B, async bool, total, aggregates int, opts ...pgstore.Option) (*pgxpool.Pool, *pgstore.Store) {
	b.Helper()
	pool, _, _ := testsvc.PostgresSchema(b)
	if async {
		cfg := pool.Config().Copy()
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		var err error
		pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(b, err)
		b.Cleanup(pool.Close)
	}
	s := newStore(b, pool, opts...)
	w := outbox.NewWriter(s)
	ctx := context.Background()
	const chunk = 5000
	for done := 0; done < total; done += chunk {
		n := min(chunk, total-done)
		msgs := make([]*outbox.Message, n)
		for i := range msgs {
			msgs[i] = &outbox.Message{
				AggregateType: "order",
				AggregateID:   fmt.Sprint(aggregateOf(done+i, aggregates)),
				EventType:     "ORDER_PAID",
				Payload:       []byte(`{"order_id":"o-42","amount":"12.50","currency":"EUR","items":[{"sku":"A-1","qty":2}]}`),
				Headers:       map[string]string{outbox.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			}
		}
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) }))
	}
	_, err := pool.Exec(ctx, "VACUUM ANALYZE outbox_message")
	require.NoError(b, err)
	return pool, s
}

// aggregateOf is the aggregate of row i of a bench table: i itself, or i
// modulo aggregates.
func aggregateOf(i, aggregates int) int {
	if aggregates > 0 {
		return i % aggregates
	}
	return i
}

func reportRows(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N*benchBatch)/s, "rows/s")
	}
}
