package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/storetest"
)

// claimTracer records the claim statements a pool runs (those that lease
// or lock rows), with their arguments.
type claimTracer struct {
	mu    sync.Mutex
	stmts []tracedStmt
}

type tracedStmt struct {
	sql  string
	args []any
}

func (c *claimTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "SKIP LOCKED") {
		c.mu.Lock()
		c.stmts = append(c.stmts, tracedStmt{d.SQL, d.Args})
		c.mu.Unlock()
	}
	return ctx
}

func (c *claimTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *claimTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *claimTracer) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: d.SQL, Args: d.Args})
}

func (c *claimTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *claimTracer) take() []tracedStmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stmts
	c.stmts = nil
	return s
}

// planNode is the part of EXPLAIN (ANALYZE, FORMAT JSON) the test reads.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	IndexName    string     `json:"Index Name"`
	RowsRemoved  float64    `json:"Rows Removed by Filter"`
	ActualRows   float64    `json:"Actual Rows"`
	ActualLoops  float64    `json:"Actual Loops"`
	Plans        []planNode `json:"Plans"`
	RelationName string     `json:"Relation Name"`
}

// rowsRead sums, over the plan's scans of table, the rows they returned and
// the rows they read and dropped, and lists the scans that read all of it.
func (n planNode) rowsRead(table string) (rows float64, seq []string) {
	if n.RelationName == table {
		rows += (n.ActualRows + n.RowsRemoved) * max(n.ActualLoops, 1)
		if n.NodeType == "Seq Scan" {
			seq = append(seq, n.NodeType)
		}
	}
	for _, c := range n.Plans {
		r, s := c.rowsRead(table)
		rows, seq = rows+r, append(seq, s...)
	}
	return rows, seq
}

// explainClaim runs EXPLAIN ANALYZE of a claim statement in a transaction
// it rolls back, and returns how many rows of table the plan read.
func explainClaim(t *testing.T, pool *pgxpool.Pool, table string, st tracedStmt) (float64, []string, string) {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // read only in effect
	var out []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+st.sql, st.args...).Scan(&out))
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(out, &plans))
	rows, seq := plans[0].Plan.rowsRead(table)
	return rows, seq, string(out)
}

// TestClaimsReadABatchOnContractOnlyTable fills a table with only the
// contract's indexes with sent rows and a small backlog, and checks that
// each kind of claim reads about its batch, not the sent rows: the plan of
// every statement a claim ran, run again under EXPLAIN ANALYZE, reads a
// bounded number of rows of the table. Claims that walked the primary key
// in id order read every sent row.
func TestClaimsReadABatchOnContractOnlyTable(t *testing.T) {
	t.Parallel()
	const sent, pending, limit = 30000, 3000, 10
	cases := []struct {
		name string
		opts []pgstore.Option
		p    outbox.ClaimParams
	}{
		{"Unordered", nil, outbox.ClaimParams{Limit: limit, Lease: time.Minute}},
		{"Held", []pgstore.Option{pgstore.WithHeldClaims(true)}, outbox.ClaimParams{Limit: limit, Lease: time.Minute}},
		{"Ordered", nil, outbox.ClaimParams{Limit: limit, Lease: time.Minute, Ordered: true}},
		{"OrderedDeadBlocks", nil, outbox.ClaimParams{Limit: limit, Lease: time.Minute, Ordered: true, BlockOnDead: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool, _, _ := testsvc.PostgresSchema(t)
			exec(t, pool, fmt.Sprintf(contractDDL, "legacy", "jsonb", "timestamptz"))
			// Sent rows first, as a table that keeps them has, then the
			// backlog; 3,000 aggregates, each with 10 sent rows and a
			// pending one. (An ordered claim also reads, for each head, the
			// rows the table keeps of its aggregate: the contract's
			// aggregate index does not hold the status.)
			exec(t, pool, `INSERT INTO legacy (message_id, aggregate_type, aggregate_id, event_type, payload, status, retry_count, next_retry_at)
				SELECT 's-' || g, 'order', (g % 3000)::text, 'E', '{}', 1, 1, now() - interval '1 hour' FROM generate_series(1, $1::int) g`, sent)
			exec(t, pool, `INSERT INTO legacy (message_id, aggregate_type, aggregate_id, event_type, payload)
				SELECT 'p-' || g, 'order', (g % 3000)::text, 'E', '{}' FROM generate_series(1, $1::int) g`, pending)
			exec(t, pool, "ANALYZE legacy")

			tr := &claimTracer{}
			cfg := pool.Config()
			cfg.ConnConfig.Tracer = tr
			traced, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(traced.Close)
			s, err := pgstore.New(traced, append([]pgstore.Option{pgstore.WithTable("legacy")}, tc.opts...)...)
			require.NoError(t, err)

			c, err := s.Claim(ctx, tc.p)
			require.NoError(t, err)
			require.NotEmpty(t, c.Messages)
			stmts := tr.take()
			require.NotEmpty(t, stmts, "the claim ran no locking statement")
			if c.Held != nil {
				_, err := c.Held.Settle(ctx, outbox.SettleParams{Sent: c.Messages})
				require.NoError(t, err)
			}
			for _, st := range stmts {
				rows, seq, plan := explainClaim(t, pool, "legacy", st)
				require.Empty(t, seq, "a claim scanned the table:\n%s\n%s", st.sql, plan)
				require.Less(t, rows, float64(1000), "a claim read %v rows of a table with %d sent rows:\n%s\n%s",
					rows, sent, st.sql, plan)
			}
		})
	}
}

// TestMissingIndexes checks that a table with only the contract's indexes
// is told the indexes its claims would use, with statements that create
// them, and that after those statements nothing is missing.
func TestMissingIndexes(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	exec(t, pool, fmt.Sprintf(contractDDL, "legacy", "jsonb", "timestamptz"))
	s, err := pgstore.New(pool, pgstore.WithTable("legacy"))
	require.NoError(t, err)
	storetest.CheckMissingIndexes(t, s, newStore(t, pool), func(sql string) { exec(t, pool, sql) }, 2)
}
