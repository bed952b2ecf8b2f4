package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgstore"
)

// seedDDL is the outbox table of the pattern's well-known write-ups, with
// only the contract's indexes (docs/table-contract.md).
const seedDDL = `CREATE TABLE outbox_message (
	id             bigserial PRIMARY KEY,
	message_id     varchar(64) NOT NULL UNIQUE,
	aggregate_type varchar(64) NOT NULL,
	aggregate_id   varchar(64) NOT NULL,
	event_type     varchar(64) NOT NULL,
	payload        jsonb NOT NULL,
	status         smallint NOT NULL DEFAULT 0,
	retry_count    int NOT NULL DEFAULT 0,
	next_retry_at  timestamptz NULL,
	created_at     timestamptz NOT NULL DEFAULT now(),
	updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON outbox_message (status, next_retry_at);
CREATE INDEX ON outbox_message (aggregate_type, aggregate_id)`

// seedTable creates the seed's table in a schema of its own, fills it with
// sent sent rows and then pending pending rows over aggs aggregates (round
// robin), migrates it when migrated, and returns its store.
func seedTable(tb testing.TB, sent, pending, aggs int, migrated bool) (*pgstore.Store, *pgxpool.Pool) {
	tb.Helper()
	ctx := context.Background()
	pool, _, _ := testsvc.PostgresSchema(tb)
	_, err := pool.Exec(ctx, seedDDL)
	require.NoError(tb, err)
	for _, fill := range []struct {
		n      int
		status int
		prefix string
	}{{sent, 1, "s-"}, {pending, 0, "p-"}} {
		_, err = pool.Exec(ctx, `INSERT INTO outbox_message
			(message_id, aggregate_type, aggregate_id, event_type, payload, status, retry_count, next_retry_at)
			SELECT $1 || g, 'order', (g % $2::int)::text, 'ORDER_CREATED', '{"n": 1}', $3::smallint, $3::int,
				CASE WHEN $3 = 1 THEN now() - interval '1 hour' END
			FROM generate_series(1, $4::int) g`, fill.prefix, aggs, fill.status, fill.n)
		require.NoError(tb, err)
	}
	_, err = pool.Exec(ctx, "VACUUM ANALYZE outbox_message")
	require.NoError(tb, err)
	s, err := pgstore.New(pool)
	require.NoError(tb, err)
	if migrated {
		require.NoError(tb, s.Migrate(ctx))
	}
	return s, pool
}

// counter confirms every message and counts them, keeping none.
type counter struct{ n atomic.Int64 }

func (c *counter) Publish(_ context.Context, msgs []*outbox.Message) []error {
	c.n.Add(int64(len(msgs)))
	return make([]error, len(msgs))
}

func (c *counter) Count() int { return int(c.n.Load()) }

// drainAll runs one relay with opts until pub has every one of want
// messages, within limit, and returns the time it took.
func drainAll(tb testing.TB, s outbox.Store, pub interface {
	outbox.Publisher
	Count() int
}, want int, limit time.Duration,
	opts ...outbox.RelayOption) time.Duration {
	tb.Helper()
	r, err := outbox.NewRelay(s, pub, append([]outbox.RelayOption{outbox.WithPollInterval(10 * time.Millisecond)}, opts...)...)
	require.NoError(tb, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(ctx) }()
	testsvc.Eventually(tb, limit, func() bool { return pub.Count() >= want }, "every message published")
	elapsed := time.Since(start)
	cancel()
	require.NoError(tb, <-done)
	return elapsed
}

// TestContractOnlyDrain drains a backlog from the seed's table, kept sent
// rows ahead of it, with ordering off and on: every message is published
// once, and every row ends sent.
func TestContractOnlyDrain(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("Ordered%v", ordered), func(t *testing.T) {
			t.Parallel()
			const sent, pending = 20000, 3000
			s, pool := seedTable(t, sent, pending, 300, false)
			pub := outboxtest.NewPublisher()
			drainAll(t, s, pub, pending, time.Minute, outbox.WithOrdering(ordered, outbox.DeadBlocks))
			require.Empty(t, pub.Duplicates())
			var left int
			require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM outbox_message WHERE status <> 1").Scan(&left))
			require.Zero(t, left)
		})
	}
}

// contractRows is the backlog of BenchmarkContractOnlyDrain: OUTBOX_BENCH_ROWS, or 1,000,000.
func contractRows() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_ROWS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// BenchmarkContractOnlyDrain drains a backlog (OUTBOX_BENCH_ROWS, 1,000,000
// by default, over 5,000 aggregates) from the seed's table with the relay's
// defaults (an in-memory publisher), on the table as the seed creates it and
// after Migrate, with ordering off and on; and reports msgs/s. Sent rows
// ahead of the backlog (OUTBOX_BENCH_SENT, 0 by default) stand for those a
// table keeps for 7 days.
//
//	go test -run '^$' -bench ContractOnlyDrain -benchtime 1x -timeout 1h ./bench
func BenchmarkContractOnlyDrain(b *testing.B) {
	rows := contractRows()
	sent, _ := strconv.Atoi(os.Getenv("OUTBOX_BENCH_SENT"))
	for _, ordered := range []bool{false, true} {
		for _, migrated := range []bool{false, true} {
			name := fmt.Sprintf("ordered=%v/table=%s", ordered, map[bool]string{false: "contract", true: "migrated"}[migrated])
			b.Run(name, func(b *testing.B) {
				var total time.Duration
				for range b.N {
					b.StopTimer()
					s, _ := seedTable(b, sent, rows, 5000, migrated)
					pub := &counter{}
					b.StartTimer()
					total += drainAll(b, s, pub, rows, time.Hour, outbox.WithOrdering(ordered, outbox.DeadBlocks))
				}
				b.ReportMetric(float64(rows*b.N)/total.Seconds(), "msgs/s")
			})
		}
	}
}
