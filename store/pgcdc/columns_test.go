package pgcdc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgcdc"
	"github.com/outboxkit/outbox/store/pgstore"
)

// debeziumDDL creates the outbox table as the documentation of Debezium's
// outbox event router shows it.
const debeziumDDL = `CREATE TABLE %s (
    id uuid NOT NULL,
    aggregatetype varchar(255) NOT NULL,
    aggregateid varchar(255) NOT NULL,
    type varchar(255) NOT NULL,
    payload jsonb,
    PRIMARY KEY (id))`

// debeziumColumns maps it: the event id is the message id.
var debeziumColumns = map[string]string{"message_id": "id", "aggregate_type": "aggregatetype",
	"aggregate_id": "aggregateid", "event_type": "type", "payload": "payload"}

// TestDebeziumLayout streams a table in Debezium's layout, written by plain
// SQL (rows kept, and rows deleted in their own transaction as Debezium's
// writers do): each message has the row's id, type, aggregate and payload;
// a message refused for good goes to the dead table; the table itself is
// never written.
func TestDebeziumLayout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		extra string            // optional columns added to the documented table
		cols  map[string]string // mapped besides debeziumColumns
	}{
		{name: "documented"},
		{name: "with optional columns",
			extra: `ALTER TABLE %s ADD COLUMN "timestamp" timestamp NOT NULL DEFAULT now(), ADD COLUMN tracingspancontext varchar(256)`,
			cols:  map[string]string{"created_at": "timestamp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, schema, dsn := testsvc.PostgresSchema(t)
			slot, pubName := testsvc.ReplicationSlot(t, schema)
			ctx := context.Background()
			table, dead := schema+".outbox", schema+".outbox_dead"
			_, err := pool.Exec(ctx, fmt.Sprintf(debeziumDDL, table))
			require.NoError(t, err)
			if tc.extra != "" {
				_, err = pool.Exec(ctx, fmt.Sprintf(tc.extra, table))
				require.NoError(t, err)
			}
			deadStore, err := pgstore.New(pool, pgstore.WithTable(dead))
			require.NoError(t, err)
			require.NoError(t, deadStore.Migrate(ctx))
			cols := map[string]string{}
			for k, v := range debeziumColumns {
				cols[k] = v
			}
			for k, v := range tc.cols {
				cols[k] = v
			}
			src, err := pgcdc.New(pool, dsn, pgcdc.WithTable(table), pgcdc.WithSlot(slot), pgcdc.WithPublication(pubName),
				pgcdc.WithColumns(cols), pgcdc.WithDeadTable(dead),
				pgcdc.WithRetryInterval(100*time.Millisecond), pgcdc.WithStatusInterval(100*time.Millisecond))
			require.NoError(t, err)
			require.True(t, src.LogOnly())
			require.NoError(t, src.CheckTable(ctx))
			pub := outboxtest.NewPublisher()
			r := start(t, src, pub, outbox.WithMaxAttempts(2), outbox.WithOrdering(true, outbox.DeadSkips))
			waitStreaming(t, r.src)

			poison := "00000000-0000-4000-8000-00000000dead"
			pub.FailWith(func(m *outbox.Message) error {
				if m.MessageID == poison {
					return outbox.Permanent(errors.New("refused"))
				}
				return nil
			})
			type row struct{ id, aggType, aggID, typ, payload string }
			var want []row
			for i := range 6 {
				w := row{id: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), aggType: "Order", aggID: fmt.Sprint(i % 2),
					typ: "OrderCreated", payload: fmt.Sprintf(`{"n": %d}`, i)}
				if i == 3 {
					w.id = poison
				}
				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, `INSERT INTO `+table+` (id, aggregatetype, aggregateid, type, payload)
VALUES ($1, $2, $3, $4, $5)`, w.id, w.aggType, w.aggID, w.typ, w.payload)
				require.NoError(t, err)
				if i%2 == 1 { // Debezium's way: the table stays empty
					_, err = tx.Exec(ctx, `DELETE FROM `+table+` WHERE id = $1`, w.id)
					require.NoError(t, err)
				}
				require.NoError(t, tx.Commit(ctx))
				if w.id != poison {
					want = append(want, w)
				}
			}
			ids := make([]string, len(want))
			for i, w := range want {
				ids[i] = w.id
			}
			waitAll(t, pub, ids)
			got := map[string]*outbox.Message{}
			for _, m := range pub.Messages() {
				got[m.MessageID] = m
			}
			for _, w := range want {
				m := got[w.id]
				require.Equal(t, w.aggType, m.AggregateType)
				require.Equal(t, w.aggID, m.AggregateID)
				require.Equal(t, w.typ, m.EventType)
				require.JSONEq(t, w.payload, string(m.Payload))
				require.Zero(t, m.RowID, "a log-only table has no row id")
				require.WithinDuration(t, time.Now(), m.CreatedAt, time.Minute)
			}
			require.NotContains(t, got, poison)
			testsvc.Eventually(t, 10*time.Second, func() bool {
				var n int
				require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+dead+` WHERE status = 2 AND message_id = $1
AND aggregate_type = 'Order' AND event_type = 'OrderCreated'`, poison).Scan(&n))
				return n == 1
			}, "the refused message is not in the dead table")
			var kept int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&kept))
			require.Equal(t, 3, kept, "the relay wrote to a log-only table")
			require.Eventually(t, func() bool { return src.Held() == 0 }, 10*time.Second, 20*time.Millisecond,
				"messages left in the window")
		})
	}
}

// TestRenamedColumnsKeepState streams a table whose state columns have
// other names: sent rows are marked sent, a refused one dead with its
// error, attempts are counted in the renamed columns.
func TestRenamedColumnsKeepState(t *testing.T) {
	t.Parallel()
	pool, dsn, slot, pubName, table, cols := renamedTable(t)
	ctx := context.Background()
	src, err := pgcdc.New(pool, dsn, pgcdc.WithTable(table), pgcdc.WithSlot(slot), pgcdc.WithPublication(pubName),
		pgcdc.WithColumns(cols), pgcdc.WithRetryInterval(100*time.Millisecond), pgcdc.WithStatusInterval(100*time.Millisecond))
	require.NoError(t, err)
	require.False(t, src.LogOnly())
	require.NoError(t, src.CheckTable(ctx))
	pub := outboxtest.NewPublisher()
	r := start(t, src, pub, outbox.WithMaxAttempts(3), outbox.WithOrdering(true, outbox.DeadSkips))
	waitStreaming(t, r.src)

	// Armed before the insert, by aggregate: the stream may publish the
	// row before the INSERT returns its id.
	pub.FailWith(func(m *outbox.Message) error {
		if m.AggregateID == "p" {
			return errors.New("refused")
		}
		return nil
	})
	var poison string
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+table+` (kind, entity, name, body, status, id)
VALUES ('order', 'p', 'ORDER_CREATED', '{"poison": true}', 'x', 'y') RETURNING event_id::text`).Scan(&poison))
	var ids []string
	for i := range 10 {
		var id string
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+table+` (kind, entity, name, body)
VALUES ('order', $1, 'ORDER_CREATED', $2) RETURNING event_id::text`, fmt.Sprint(i%3), fmt.Sprintf(`{"n":%d}`, i)).Scan(&id))
		ids = append(ids, id)
	}
	waitAll(t, pub, ids)
	for _, m := range pub.Messages() {
		if m.MessageID != poison {
			require.NotZero(t, m.RowID)
			require.Equal(t, "ORDER_CREATED", m.EventType)
			var body map[string]int
			require.NoError(t, json.Unmarshal(m.Payload, &body))
		}
	}
	testsvc.Eventually(t, 15*time.Second, func() bool {
		var sent, dead int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 1),
count(*) FILTER (WHERE state = 2 AND event_id::text = $1 AND tries = 3 AND why LIKE '%refused%')
FROM `+table, poison).Scan(&sent, &dead))
		return sent == len(ids) && dead == 1
	}, "rows not settled in the renamed columns")
	var status, id string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, id FROM `+table+` WHERE event_id::text = $1`, poison).Scan(&status, &id))
	require.Equal(t, []string{"x", "y"}, []string{status, id}, "an unmapped column was written")
}

// renamedTable creates, in a schema of its own with a replication slot and
// a publication, a table whose state columns have other names (and which
// has a status and an id column that are not the contract's), and returns
// them and its mapping.
func renamedTable(t *testing.T) (pool *pgxpool.Pool, dsn, slot, pubName, table string, cols map[string]string) {
	t.Helper()
	pool, schema, dsn := testsvc.PostgresSchema(t)
	slot, pubName = testsvc.ReplicationSlot(t, schema)
	table = schema + ".events"
	_, err := pool.Exec(context.Background(), `CREATE TABLE `+table+` (
    seq bigserial PRIMARY KEY, event_id uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    kind text NOT NULL, entity text NOT NULL, name text NOT NULL, body jsonb NOT NULL,
    state smallint NOT NULL DEFAULT 0, tries int NOT NULL DEFAULT 0, due_at timestamptz,
    written_at timestamptz NOT NULL DEFAULT now(), changed_at timestamptz NOT NULL DEFAULT now(), why text,
    status text, id text)`) // a status and an id that are not the contract's: never read or written
	require.NoError(t, err)
	return pool, dsn, slot, pubName, table, map[string]string{"id": "seq", "message_id": "event_id", "aggregate_type": "kind", "aggregate_id": "entity",
		"event_type": "name", "payload": "body", "status": "state", "retry_count": "tries", "next_retry_at": "due_at",
		"created_at": "written_at", "updated_at": "changed_at", "last_error": "why"}
}

// TestRenamedColumnsFailover cuts the replication connection of a source
// on a table whose state columns have other names: it polls the table
// through its fallback, a pgstore with the same mapping, which publishes
// and settles the rows written meanwhile in the renamed columns, and
// streams again once the connection is back.
func TestRenamedColumnsFailover(t *testing.T) {
	t.Parallel()
	pool, dsn, slot, pubName, table, cols := renamedTable(t)
	ctx := context.Background()
	fallback, err := pgstore.New(pool, pgstore.WithTable(table), pgstore.WithColumns(cols))
	require.NoError(t, err)
	require.NoError(t, fallback.CheckTable(ctx))
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := faultproxy.New(t, u.Host)
	u.Host = proxy.Addr()
	src, err := pgcdc.New(pool, u.String(), pgcdc.WithTable(table), pgcdc.WithSlot(slot), pgcdc.WithPublication(pubName),
		pgcdc.WithColumns(cols), pgcdc.WithFallback(fallback), pgcdc.WithRetryInterval(100*time.Millisecond),
		pgcdc.WithStatusInterval(100*time.Millisecond), pgcdc.WithFailoverAfter(300*time.Millisecond))
	require.NoError(t, err)
	pub := outboxtest.NewPublisher()
	r := start(t, src, pub)
	waitStreaming(t, r.src)
	write := func(n int) []string {
		var ids []string
		for i := range n {
			var id string
			require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+table+` (kind, entity, name, body)
VALUES ('order', $1, 'ORDER_CREATED', '{}') RETURNING event_id::text`, fmt.Sprint(i%2)).Scan(&id))
			ids = append(ids, id)
		}
		return ids
	}
	waitAll(t, pub, write(5))

	proxy.Cut()
	testsvc.Eventually(t, 10*time.Second, func() bool { return r.src.Mode() == pgcdc.ModePolling }, "no failover")
	during := write(5)
	waitAll(t, pub, during)
	testsvc.Eventually(t, 10*time.Second, func() bool {
		var sent int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE state = 1 AND event_id::text = ANY($1)`,
			during).Scan(&sent))
		return sent == len(during)
	}, "rows polled in the failover not marked sent in the renamed column")

	proxy.Restore()
	waitStreaming(t, r.src)
	waitAll(t, pub, write(5))
	var status, id *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(status), max(id) FROM `+table).Scan(&status, &id))
	require.Nil(t, status, "an unmapped column was written")
	require.Nil(t, id, "an unmapped column was written")
}

// TestColumnsRefused: a mapping New refuses, and one that names columns the
// table lacks, which CheckTable reports with the mapping and the columns.
func TestColumnsRefused(t *testing.T) {
	t.Parallel()
	pool, schema, dsn := testsvc.PostgresSchema(t)
	ctx := context.Background()
	table := schema + ".outbox"
	_, err := pool.Exec(ctx, fmt.Sprintf(debeziumDDL, table))
	require.NoError(t, err)
	fallback, err := pgstore.New(pool, pgstore.WithTable(table))
	require.NoError(t, err)
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range debeziumColumns {
			m[a] = b
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name string
		opts []pgcdc.Option
		new  string // New's error
		chk  []string
	}{
		{name: "required left out", opts: []pgcdc.Option{pgcdc.WithColumns(with("event_type", "")), pgcdc.WithDeadTable("d")},
			new: "WithColumns: required columns not mapped: event_type"},
		{name: "state in part", opts: []pgcdc.Option{pgcdc.WithColumns(with("status", "state"))},
			new: "state columns mapped in part"},
		{name: "log-only without dead table", opts: []pgcdc.Option{pgcdc.WithColumns(debeziumColumns)},
			new: "WithDeadTable: a log-only table"},
		{name: "log-only with fallback", opts: []pgcdc.Option{pgcdc.WithColumns(debeziumColumns), pgcdc.WithDeadTable("d"),
			pgcdc.WithFallback(fallback)}, new: "WithFallback: a log-only table (WithColumns maps no state columns) cannot be polled"},
		{name: "dead table without mapping", opts: []pgcdc.Option{pgcdc.WithDeadTable("d")}, new: "WithDeadTable: only for a log-only table"},
		{name: "missing column", opts: []pgcdc.Option{pgcdc.WithColumns(with("event_type", "event_type")),
			pgcdc.WithDeadTable(schema + ".nope")},
			chk: []string{"names columns that table " + table + " does not have (event_type -> event_type)",
				"message_id: id, aggregate_type: aggregatetype, aggregate_id: aggregateid, event_type: event_type, payload: payload",
				"the table has: aggregateid, aggregatetype, id, payload, type",
				"dead table " + schema + ".nope not found"}},
		{name: "no table", opts: []pgcdc.Option{pgcdc.WithTable(schema + ".absent"), pgcdc.WithColumns(debeziumColumns),
			pgcdc.WithDeadTable(table)},
			chk: []string{"table " + schema + ".absent not found", "dead table " + table + " lacks contract columns: message_id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src, err := pgcdc.New(pool, dsn, append([]pgcdc.Option{pgcdc.WithTable(table)}, tc.opts...)...)
			if tc.new != "" {
				require.ErrorContains(t, err, tc.new)
				return
			}
			require.NoError(t, err)
			err = src.CheckTable(ctx)
			var te *outbox.TableError
			require.ErrorAs(t, err, &te)
			for _, c := range tc.chk {
				require.Contains(t, err.Error(), c)
			}
		})
	}
}
