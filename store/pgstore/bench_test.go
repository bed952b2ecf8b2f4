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
// Lease is the shape the Store implements: the claim commits on its own
// (attempt counted, lease set), the ack is a second fenced statement. InTx is
// the other shape, written here by hand for comparison: BEGIN and SELECT ...
// FOR UPDATE SKIP LOCKED in one round trip, then UPDATE/DELETE and COMMIT in
// a second, with the rows locked and a connection held in between (while a
// relay would publish). Each runs with the server's synchronous_commit and
// with synchronous_commit = off on the relay's sessions (a commit lost in a
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
			b.Run("InTx/"+mode+"/"+commit, func(b *testing.B) {
				pool, _ := benchTable(b, commit == "AsyncCommit")
				ctx := context.Background()
				finish := `UPDATE outbox_message SET status = 1, updated_at = now() WHERE id = ANY($1)`
				if del {
					finish = `DELETE FROM outbox_message WHERE id = ANY($1)`
				}
				conn, err := pool.Acquire(ctx)
				require.NoError(b, err)
				defer conn.Release()
				b.ResetTimer()
				for range b.N {
					ids, err := claimInTx(ctx, conn.Conn())
					if err != nil || len(ids) != benchBatch {
						b.Fatalf("claim: %d rows, %v", len(ids), err)
					}
					// ... the relay would publish here, holding the locks ...
					batch := &pgx.Batch{}
					batch.Queue(finish, ids)
					batch.Queue("COMMIT")
					if err := conn.Conn().SendBatch(ctx, batch).Close(); err != nil {
						b.Fatalf("ack: %v", err)
					}
				}
				b.StopTimer()
				reportRows(b)
			})
		}
	}
}

// claimInTx opens a transaction and locks up to benchBatch due rows in one
// round trip, returning their ids; the caller commits.
func claimInTx(ctx context.Context, conn *pgx.Conn) ([]int64, error) {
	batch := &pgx.Batch{}
	batch.Queue("BEGIN")
	batch.Queue("SET LOCAL idle_in_transaction_session_timeout = '30s'")
	batch.Queue(`SELECT id, message_id, aggregate_type, aggregate_id, event_type, payload::text, created_at,
		headers::text, topic, partition_key
	FROM outbox_message
	WHERE status = 0 AND (next_retry_at IS NULL OR next_retry_at <= now())
	ORDER BY id LIMIT $1
	FOR UPDATE SKIP LOCKED`, benchBatch)
	br := conn.SendBatch(ctx, batch)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	var ids []int64
	var r struct {
		id                                  int64
		msgID, aggType, aggID, evt, payload string
		created                             time.Time
		headers, topic, key                 *string
	}
	for rows.Next() {
		if err := rows.Scan(&r.id, &r.msgID, &r.aggType, &r.aggID, &r.evt, &r.payload, &r.created,
			&r.headers, &r.topic, &r.key); err != nil {
			return nil, err
		}
		ids = append(ids, r.id)
	}
	return ids, rows.Err()
}

// benchTable returns a migrated table holding b.N batches of pending rows,
// and a pool on it whose sessions commit asynchronously when async.
func benchTable(b *testing.B, async bool) (*pgxpool.Pool, *pgstore.Store) {
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
	s := newStore(b, pool)
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
