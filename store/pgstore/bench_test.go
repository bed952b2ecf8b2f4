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

// benchTable returns a migrated table holding b.N batches of pending rows,
// a pool on it whose sessions commit asynchronously when async, and a Store
// with opts.
func benchTable(b *testing.B, async bool, opts ...pgstore.Option) (*pgxpool.Pool, *pgstore.Store) {
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
	total := b.N * benchBatch
	const chunk = 5000
	for done := 0; done < total; done += chunk {
		n := min(chunk, total-done)
		msgs := make([]*outbox.Message, n)
		for i := range msgs {
			msgs[i] = &outbox.Message{
				AggregateType: "order",
				AggregateID:   fmt.Sprint(done + i),
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

func reportRows(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N*benchBatch)/s, "rows/s")
	}
}
