package pgcdc_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgcdc"
)

// queryCounter counts the statements run on a pool and keeps their text.
type queryCounter struct {
	n   atomic.Int64
	mu  sync.Mutex
	sql []string
}

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	c.mu.Lock()
	c.sql = append(c.sql, strings.Join(strings.Fields(d.SQL), " "))
	c.mu.Unlock()
	return ctx
}

func (*queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestClaimLooksUpInOneRoundTrip claims streamed messages of kept rows: the
// claim checks that their transactions are visible and reads the rows'
// status with one statement, in one snapshot, where it took two round
// trips (a visibility check, then the look-up), each on every message's
// way to the broker (docs/cdc.md, "Cost").
func TestClaimLooksUpInOneRoundTrip(t *testing.T) {
	t.Parallel()
	e := setup(t, false)
	var counter queryCounter
	cfg, err := pgxpool.ParseConfig(e.dsn)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = &counter
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	src, err := pgcdc.New(pool, e.dsn, pgcdc.WithTable(e.table), pgcdc.WithSlot(e.slot), pgcdc.WithPublication(e.pub),
		pgcdc.WithFallback(e.store), pgcdc.WithStatusInterval(100*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitStreaming(t, src)

	e.write(5, 1, "a")
	e.write(3, 3, "b")
	testsvc.Eventually(t, 10*time.Second, func() bool { return src.Held() == 8 }, "the stream did not bring 8 messages")
	before := counter.n.Load()
	claim, err := src.Claim(t.Context(), outbox.ClaimParams{Limit: 100, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claim.Messages, 8)
	counter.mu.Lock()
	ran := counter.sql[before:]
	counter.mu.Unlock()
	require.Len(t, ran, 1, "statements of one claim: %q", ran)

	// The messages are the table's pending rows: acknowledged, they are sent.
	n, err := src.Ack(t.Context(), outbox.AckParams{Messages: claim.Messages})
	require.NoError(t, err)
	require.Equal(t, 8, n)
	require.Equal(t, map[int]int{1: 8}, e.statusCounts())
}
