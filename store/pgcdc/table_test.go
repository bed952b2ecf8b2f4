package pgcdc_test

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgcdc"
	"github.com/outboxkit/outbox/store/pgstore"
)

// TestOnlyInsertsOfAContractTable streams a table that has only the
// contract's columns, written by plain SQL, through a publication that
// also publishes updates, deletes and truncates: those are ignored, and a
// column added while streaming changes nothing.
func TestOnlyInsertsOfAContractTable(t *testing.T) {
	t.Parallel()
	pool, schema, dsn := testsvc.PostgresSchema(t)
	slot, pubName := testsvc.ReplicationSlot(t, schema)
	ctx := context.Background()
	table := schema + ".bare_outbox"
	_, err := pool.Exec(ctx, `CREATE TABLE `+table+` (
    id bigserial PRIMARY KEY, message_id varchar(64) NOT NULL UNIQUE,
    aggregate_type varchar(64) NOT NULL, aggregate_id varchar(64) NOT NULL, event_type varchar(64) NOT NULL,
    payload jsonb NOT NULL, status smallint NOT NULL DEFAULT 0, retry_count int NOT NULL DEFAULT 0,
    next_retry_at timestamptz, created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE PUBLICATION `+pubName+` FOR TABLE `+table) // every operation, not only inserts
	require.NoError(t, err)
	fallback, err := pgstore.New(pool, pgstore.WithTable(table))
	require.NoError(t, err)
	src, err := pgcdc.New(pool, dsn, pgcdc.WithTable(table), pgcdc.WithSlot(slot), pgcdc.WithPublication(pubName),
		pgcdc.WithFallback(fallback), pgcdc.WithRetryInterval(100*time.Millisecond), pgcdc.WithStatusInterval(100*time.Millisecond))
	require.NoError(t, err)
	pub := outboxtest.NewPublisher()
	r := start(t, src, pub)
	waitStreaming(t, r.src)

	n := 0
	insert := func(k int) (ids []string) {
		for range k {
			n++
			id := fmt.Sprintf("m-%d", n)
			_, err := pool.Exec(ctx, `INSERT INTO `+table+` (message_id, aggregate_type, aggregate_id, event_type, payload)
VALUES ($1, 'order', 'o-1', 'ORDER_CREATED', '{"a":1}')`, id)
			require.NoError(t, err)
			ids = append(ids, id)
		}
		return ids
	}
	ids := insert(5)
	waitAll(t, pub, ids)
	for _, q := range []string{
		`UPDATE ` + table + ` SET payload = '{"a":2}', status = 0`,
		`DELETE FROM ` + table + ` WHERE message_id = 'm-1'`,
		`ALTER TABLE ` + table + ` ADD COLUMN extra text DEFAULT 'x'`,
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	ids = append(ids, insert(5)...)
	waitAll(t, pub, ids)
	_, err = pool.Exec(ctx, `TRUNCATE `+table)
	require.NoError(t, err)
	ids = append(ids, insert(2)...)
	waitAll(t, pub, ids)
	require.Equal(t, len(ids), pub.Count(), "an update, delete or truncate was published")
	require.True(t, inOrder(pub, ids))
}

// TestLargeTransactionHoldsAWindow commits one transaction of many rows:
// the source never holds more than its window, whatever the transaction's
// size, and confirms the slot past it once all is sent.
func TestLargeTransactionHoldsAWindow(t *testing.T) {
	t.Parallel()
	e := setup(t, true)
	pub := outboxtest.NewPublisher()
	const window = 500
	r := start(t, e.source(pgcdc.WithMaxWindow(window)), pub, outbox.WithBatchSize(100))
	waitStreaming(t, r.src)
	before := r.src.Confirmed()

	var most atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pub.Count() < 20000 {
			most.Store(max(most.Load(), int64(r.src.Held())))
			time.Sleep(time.Millisecond)
		}
	}()
	ids := e.write(20000, 20000, "big")
	waitAll(t, pub, ids)
	<-done
	t.Logf("held at most %d messages of a 20,000-row transaction", most.Load())
	require.LessOrEqual(t, most.Load(), int64(window))
	require.Positive(t, most.Load())
	testsvc.Eventually(t, 10*time.Second, func() bool { return r.src.Confirmed() > before }, "slot not confirmed past the transaction")
}

// TestStreamDownFailsOverAfterTime cuts the replication connection (through
// a proxy; the table stays reachable): after the failover time the source
// polls the table, and streams again once the connection is back.
func TestStreamDownFailsOverAfterTime(t *testing.T) {
	t.Parallel()
	e := setup(t, false)
	u, err := url.Parse(e.dsn)
	require.NoError(t, err)
	proxy := faultproxy.New(t, u.Host)
	u.Host = proxy.Addr()
	src, err := pgcdc.New(e.pool, u.String(), pgcdc.WithTable(e.table), pgcdc.WithSlot(e.slot), pgcdc.WithPublication(e.pub),
		pgcdc.WithFallback(e.store), pgcdc.WithRetryInterval(100*time.Millisecond),
		pgcdc.WithStatusInterval(100*time.Millisecond), pgcdc.WithFailoverAfter(300*time.Millisecond))
	require.NoError(t, err)
	pub := outboxtest.NewPublisher()
	r := start(t, src, pub)
	waitStreaming(t, r.src)
	ids := e.write(10, 2, "a")
	waitAll(t, pub, ids)

	proxy.Cut()
	testsvc.Eventually(t, 10*time.Second, func() bool { return r.src.Mode() == pgcdc.ModePolling }, "no failover")
	during := e.write(10, 2, "b")
	waitAll(t, pub, during)

	proxy.Restore()
	waitStreaming(t, r.src)
	after := e.write(10, 2, "c")
	waitAll(t, pub, after)
	require.GreaterOrEqual(t, r.src.Switches(), int64(2))
	dups := 0
	for _, c := range pub.Duplicates() {
		dups += c - 1
	}
	t.Logf("%d switches, %d duplicates published, %d counted by the source", r.src.Switches(), dups, r.src.Duplicates())
	require.LessOrEqual(t, int64(dups), r.src.Duplicates()+int64(len(during)))
}
