package pgcdc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgcdc"
	"github.com/outboxkit/outbox/store/pgstore"
)

// env is one test's table, slot and publication.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	dsn    string
	table  string
	slot   string
	pub    string
	store  *pgstore.Store
	writer *outbox.Writer[pgx.Tx]
}

// setup makes a migrated table in a schema of the test's own, and names a
// slot and a publication after it, which are dropped when the test ends.
func TestMain(m *testing.M) {
	code := m.Run()
	if left, err := testsvc.LeftoverSlots(); err != nil || len(left) > 0 {
		fmt.Fprintf(os.Stderr, "replication slots left behind: %v %v\n", left, err)
		code = 1
	}
	os.Exit(code)
}

func setup(t *testing.T, deleteAfterInsert bool) *env {
	t.Helper()
	pool, schema, dsn := testsvc.PostgresSchema(t)
	slot, pub := testsvc.ReplicationSlot(t, schema)
	e := &env{t: t, pool: pool, dsn: dsn, table: schema + ".outbox_message", slot: slot, pub: pub}
	var err error
	e.store, err = pgstore.New(pool, pgstore.WithTable(e.table))
	require.NoError(t, err)
	require.NoError(t, e.store.Migrate(context.Background()))
	var wopts []outbox.WriterOption
	if deleteAfterInsert {
		wopts = append(wopts, outbox.WithDeleteAfterInsert())
	}
	e.writer = outbox.NewWriter(e.store, wopts...)
	return e
}

// source returns a Source on e's table with short intervals.
func (e *env) source(opts ...pgcdc.Option) *pgcdc.Source {
	e.t.Helper()
	all := append([]pgcdc.Option{pgcdc.WithTable(e.table), pgcdc.WithSlot(e.slot), pgcdc.WithPublication(e.pub),
		pgcdc.WithFallback(e.store), pgcdc.WithRetryInterval(100 * time.Millisecond),
		pgcdc.WithStatusInterval(100 * time.Millisecond)}, opts...)
	s, err := pgcdc.New(e.pool, e.dsn, all...)
	require.NoError(e.t, err)
	return s
}

// running is a Source and a Relay running until stop.
type running struct {
	src    *pgcdc.Source
	relay  *outbox.Relay
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// start runs src and a relay on it to pub.
func start(t *testing.T, src *pgcdc.Source, pub outbox.Publisher, opts ...outbox.RelayOption) *running {
	t.Helper()
	return startOn(t, src, src, pub, opts...)
}

// startOn runs src and a relay on store (src, or a wrapper of it) to pub.
func startOn(t *testing.T, src *pgcdc.Source, store outbox.Store, pub outbox.Publisher, opts ...outbox.RelayOption) *running {
	t.Helper()
	all := append([]outbox.RelayOption{outbox.WithPollInterval(200 * time.Millisecond),
		outbox.WithMinPollInterval(5 * time.Millisecond), outbox.WithBackoff(20*time.Millisecond, 100*time.Millisecond),
		outbox.WithProbeInterval(50*time.Millisecond, 200*time.Millisecond), outbox.WithMaxInFlight(1)}, opts...)
	relay, err := outbox.NewRelay(store, pub, all...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{src: src, relay: relay, cancel: cancel}
	r.wg.Go(func() { _ = src.Run(ctx) })
	r.wg.Go(func() { _ = relay.Run(ctx) })
	t.Cleanup(r.stop)
	return r
}

// stop ends the source's connection and the relay at once, as a kill would
// for the slot: the source confirms nothing more.
func (r *running) stop() {
	r.cancel()
	r.wg.Wait()
}

// waitStreaming waits until src streams.
func waitStreaming(t *testing.T, src *pgcdc.Source) time.Duration {
	t.Helper()
	begin := time.Now()
	testsvc.Eventually(t, 15*time.Second, func() bool { return src.Streaming() && src.Mode() == pgcdc.ModeStream },
		"source never streamed")
	return time.Since(begin)
}

// write commits n messages of aggregate agg, one transaction each unless
// perTx says more, and returns their ids in commit order.
func (e *env) write(n, perTx int, agg string) []string {
	e.t.Helper()
	ctx := context.Background()
	var ids []string
	for i := 0; i < n; i += perTx {
		tx, err := e.pool.Begin(ctx)
		require.NoError(e.t, err)
		var msgs []*outbox.Message
		for j := i; j < min(i+perTx, n); j++ {
			msgs = append(msgs, &outbox.Message{AggregateType: "order", AggregateID: agg, EventType: "ORDER_CREATED",
				Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, j))})
		}
		require.NoError(e.t, e.writer.Write(ctx, tx, msgs...))
		require.NoError(e.t, tx.Commit(ctx))
		for _, m := range msgs {
			ids = append(ids, m.MessageID)
		}
	}
	return ids
}

// rollback writes a message and rolls its transaction back; it returns its id.
func (e *env) rollback() string {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	require.NoError(e.t, err)
	m := &outbox.Message{AggregateType: "order", AggregateID: "rolled", EventType: "ORDER_CREATED", Payload: json.RawMessage(`{}`)}
	require.NoError(e.t, e.writer.Write(ctx, tx, m))
	require.NoError(e.t, tx.Rollback(ctx))
	return m.MessageID
}

// statusCounts returns how many rows of each status the table holds.
func (e *env) statusCounts() map[int]int {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), "SELECT status, count(*) FROM "+e.table+" GROUP BY status")
	require.NoError(e.t, err)
	out := map[int]int{}
	for rows.Next() {
		var st, n int
		require.NoError(e.t, rows.Scan(&st, &n))
		out[st] = n
	}
	require.NoError(e.t, rows.Err())
	return out
}

// waitAll waits until pub has published every id at least once.
func waitAll(t *testing.T, pub *outboxtest.Publisher, ids []string) {
	t.Helper()
	testsvc.Eventually(t, 30*time.Second, func() bool {
		seen := firstSeen(pub)
		for _, id := range ids {
			if _, ok := seen[id]; !ok {
				return false
			}
		}
		return true
	}, "not every message was published")
}

// firstSeen maps each published message id to where it was first published.
func firstSeen(pub *outboxtest.Publisher) map[string]int {
	seen := map[string]int{}
	for i, m := range pub.Messages() {
		if _, ok := seen[m.MessageID]; !ok {
			seen[m.MessageID] = i
		}
	}
	return seen
}

// inOrder reports whether ids were first published in the order given.
func inOrder(pub *outboxtest.Publisher, ids []string) bool {
	seen := firstSeen(pub)
	for i := 1; i < len(ids); i++ {
		if seen[ids[i-1]] > seen[ids[i]] {
			return false
		}
	}
	return true
}
