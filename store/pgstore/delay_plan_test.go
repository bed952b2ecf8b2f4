package pgstore_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
)

// TestClaimsOverManyDelayedRows puts 100,000 delayed rows (DeliverAt an
// hour ahead, next_retry_at with it) in front of 300 due ones in a migrated
// table and checks that each kind of claim takes due rows only and reads
// the table through an index, never a scan of it. It logs how many rows
// each claim read and how long it ran, alone and behind the delayed rows,
// for docs/tuning.md ("Delayed messages"): an index walk in id order (the
// planner's choice for a small batch) steps over every delayed row.
func TestClaimsOverManyDelayedRows(t *testing.T) {
	t.Parallel()
	const delayed, due, limit = 100000, 300, 100
	cases := []struct {
		name string
		opts []pgstore.Option
		p    outbox.ClaimParams
	}{
		{"Unordered", nil, outbox.ClaimParams{Limit: limit, Lease: time.Minute}},
		{"UnorderedBatch10", nil, outbox.ClaimParams{Limit: 10, Lease: time.Minute}},
		{"Held", []pgstore.Option{pgstore.WithHeldClaims(true)}, outbox.ClaimParams{Limit: limit, Lease: time.Minute}},
		{"Ordered", nil, outbox.ClaimParams{Limit: limit, Lease: time.Minute, Ordered: true}},
		{"OrderedDeadBlocks", nil, outbox.ClaimParams{Limit: limit, Lease: time.Minute, Ordered: true, BlockOnDead: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool, _, _ := testsvc.PostgresSchema(t)
			plain, err := pgstore.New(pool)
			require.NoError(t, err)
			require.NoError(t, plain.Migrate(ctx))
			// Due rows with high ids, claimed once alone (the baseline);
			// then the delayed rows in front of them (lower ids), each its
			// own aggregate, as Write with DeliverAt leaves them.
			exec(t, pool, `INSERT INTO outbox_message (id, message_id, aggregate_type, aggregate_id, event_type, payload)
				SELECT 1000000 + g, 'p-' || g, 'order', 'p' || g, 'E', '{}' FROM generate_series(1, $1::int) g`, due)
			exec(t, pool, "ANALYZE outbox_message")
			s := newDelayClaimStore(t, pool, tc.opts...)
			before := claimPlan(t, pool, s, tc.p, false) // a table of 300 rows may well be scanned
			exec(t, pool, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, deliver_at, next_retry_at)
				SELECT 'd-' || g, 'order', 'd' || g, 'E', '{}', now() + interval '1 hour', now() + interval '1 hour'
				FROM generate_series(1, $1::int) g`, delayed)
			exec(t, pool, "ANALYZE outbox_message")
			after := claimPlan(t, pool, s, tc.p, true)
			t.Logf("%s, %d due rows: alone read %.0f rows in %.3f ms; behind %d delayed rows read %.0f rows in %.3f ms",
				tc.name, due, before.rows, before.ms, delayed, after.rows, after.ms)
		})
	}
}

// delayClaimStore is a Store on pool's database whose claim statements a
// claimTracer records.
type delayClaimStore struct {
	*pgstore.Store
	tr *claimTracer
}

func newDelayClaimStore(t *testing.T, pool *pgxpool.Pool, opts ...pgstore.Option) delayClaimStore {
	t.Helper()
	tr := &claimTracer{}
	cfg := pool.Config()
	cfg.ConnConfig.Tracer = tr
	traced, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	s, err := pgstore.New(traced, opts...)
	require.NoError(t, err)
	return delayClaimStore{s, tr}
}

// planCost is what EXPLAIN ANALYZE found of a claim's statements.
type planCost struct {
	rows float64 // rows of the table read
	ms   float64 // execution time
}

// claimPlan claims with p (due rows only, settled at once), then runs its
// statements again under EXPLAIN ANALYZE, rolled back: with indexed, none
// may scan the table.
func claimPlan(t *testing.T, pool *pgxpool.Pool, s delayClaimStore, p outbox.ClaimParams, indexed bool) planCost {
	t.Helper()
	c, err := s.Claim(t.Context(), p)
	require.NoError(t, err)
	require.Len(t, c.Messages, p.Limit)
	for _, m := range c.Messages {
		require.Equal(t, "p", m.AggregateID[:1], "a delayed row was claimed: %s", m.MessageID)
	}
	if c.Held != nil {
		_, err := c.Held.Settle(t.Context(), outbox.SettleParams{Sent: c.Messages})
		require.NoError(t, err)
	}
	stmts := s.tr.take()
	require.NotEmpty(t, stmts, "the claim ran no locking statement")
	var cost planCost
	for _, st := range stmts {
		rows, seq, plan := explainClaim(t, pool, "outbox_message", st)
		if indexed {
			require.Empty(t, seq, "a claim scanned the table:\n%s\n%s", st.sql, plan)
		}
		var out []struct {
			ExecutionTime float64 `json:"Execution Time"`
		}
		require.NoError(t, json.Unmarshal([]byte(plan), &out))
		cost.rows += rows
		cost.ms += out[0].ExecutionTime
	}
	return cost
}
