package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// natsMsg is what a test reads back of a message in the stream.
type natsMsg struct {
	subject string
	header  map[string]string
	data    []byte
}

// messages returns every message of the stream, in order.
func (s *natsStream) messages(t *testing.T) []natsMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, s.name)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	var out []natsMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		require.NoError(t, err)
		h := map[string]string{}
		for k := range m.Header {
			h[k] = m.Header.Get(k)
		}
		out = append(out, natsMsg{subject: m.Subject, header: h, data: m.Data})
	}
	return out
}

// waitStreaming waits until the daemon logged that its change stream
// started: the rows written before would otherwise be polled by the
// fallback, or, for a log-only table, which has none, missed (the slot is
// active while it is being created too).
func waitStreaming(t *testing.T, logs *syncBuffer) {
	t.Helper()
	testsvc.Eventually(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), "change stream started") },
		"the change stream did not start")
}

// TestRunDebeziumTableToNATS points the daemon (source cdc) at a table
// created as Debezium's outbox event router documents it, written by plain
// SQL, with a columns: mapping: each message reaches JetStream with the
// row's id as its message id, its type, aggregate and payload; a message
// refused for good is recorded in the dead table, which the daemon
// created; the table is never written.
func TestRunDebeziumTableToNATS(t *testing.T) {
	t.Parallel()
	pool, schema, dsn := testsvc.PostgresSchema(t)
	stream := newNATSStream(t)
	ctx := context.Background()
	slot, pub := testsvc.ReplicationSlot(t, schema)
	_, err := pool.Exec(ctx, `CREATE TABLE outbox (
    id uuid NOT NULL,
    aggregatetype varchar(255) NOT NULL,
    aggregateid varchar(255) NOT NULL,
    type varchar(255) NOT NULL,
    payload jsonb,
    PRIMARY KEY (id))`)
	require.NoError(t, err)

	cfg := baseConfig(config.NewSecret(dsn), stream.broker("events"))
	cfg.Table, cfg.Source, cfg.CDCSlot, cfg.CDCPublication = "outbox", config.SourceCDC, slot, pub
	cfg.Columns = map[string]string{"message_id": "id", "aggregate_type": "aggregatetype", "aggregate_id": "aggregateid",
		"event_type": "type", "payload": "payload"}
	cfg.MaxAttempts = 2
	cfg.HTTP = "127.0.0.1:0"
	require.NoError(t, cfg.Validate())
	d, logs, stop := startLogged(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
			t.Log("count", stream.count(t))
			resp, err := http.Get(d.HTTPURL() + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, l := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(l, "outbox_") {
						t.Log(l)
					}
				}
			}
		}
	})
	waitStreaming(t, logs)

	type row struct{ id, aggType, aggID, typ, payload string }
	var want []row
	for i := range 8 {
		w := row{id: fmt.Sprintf("0190a000-0000-7000-8000-%012d", i), aggType: "Order", aggID: fmt.Sprint(100 + i%3),
			typ: []string{"OrderCreated", "OrderPaid"}[i%2], payload: fmt.Sprintf(`{"order": %d, "total": 9.5}`, i)}
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5)`,
			w.id, w.aggType, w.aggID, w.typ, w.payload)
		require.NoError(t, err)
		if i%2 == 0 { // Debezium's way: insert and delete, the table stays empty
			_, err = tx.Exec(ctx, `DELETE FROM outbox WHERE id = $1`, w.id)
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit(ctx))
		want = append(want, w)
	}
	// A payload the relay cannot send (a JSON string is fine; NULL is not a message).
	poison := "0190a000-0000-7000-8000-00000000dead"
	_, err = pool.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'Order', '1', 'OrderCreated', NULL)`, poison)
	require.NoError(t, err)

	testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == uint64(len(want)) }, "the messages are not sent")
	got := stream.messages(t)
	require.Len(t, got, len(want))
	byID, last := map[string]natsMsg{}, map[string]int{}
	for i, m := range got {
		byID[m.header[jetstream.MsgIDHeader]] = m
		agg := m.header[outbox.HeaderAggregateID]
		n, _ := strconv.Atoi(m.header[jetstream.MsgIDHeader][24:])
		require.Greater(t, n+1, last[agg], "message %d out of its aggregate's order", i)
		last[agg] = n + 1
	}
	for _, w := range want {
		m, ok := byID[w.id]
		require.True(t, ok, "message %s not sent", w.id)
		require.Equal(t, stream.prefix+w.typ, m.subject)
		require.Equal(t, w.aggType, m.header[outbox.HeaderAggregateType])
		require.Equal(t, w.aggID, m.header[outbox.HeaderAggregateID])
		require.Equal(t, w.typ, m.header[outbox.HeaderEventType])
		var a, b any
		require.NoError(t, json.Unmarshal([]byte(w.payload), &a))
		require.NoError(t, json.Unmarshal(m.data, &b))
		require.Equal(t, a, b)
	}
	testsvc.Eventually(t, 10*time.Second, func() bool {
		var n int
		return pool.QueryRow(ctx, `SELECT count(*) FROM outbox_dead WHERE status = 2 AND message_id = $1`, poison).Scan(&n) == nil && n == 1
	}, "the malformed message is not in the dead table")
	var kept int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&kept))
	require.Equal(t, 5, kept, "the relay changed the Debezium table")
	require.NoError(t, stop())
}

// TestRunRenamedColumnsToNATS runs the daemon on a table whose state
// columns have other names: messages reach JetStream and rows are marked
// sent in the renamed status column.
func TestRunRenamedColumnsToNATS(t *testing.T) {
	t.Parallel()
	pool, schema, dsn := testsvc.PostgresSchema(t)
	stream := newNATSStream(t)
	slot, pub := testsvc.ReplicationSlot(t, schema)
	cfg := baseConfig(config.NewSecret(dsn), stream.broker("events"))
	cfg.Table, cfg.Source, cfg.CDCSlot, cfg.CDCPublication = "events", config.SourceCDC, slot, pub
	cfg.Columns = renamedEvents(t, pool)
	require.NoError(t, cfg.Validate())
	_, logs, stop := startLogged(t, cfg)
	waitStreaming(t, logs)
	ids := writeEvents(t, pool, 0, 10)
	checkEventsSent(t, pool, stream, ids)
	require.NoError(t, stop())
}

// TestRunRenamedColumnsPolling runs the daemon with source polling on a
// table whose columns all have other names: the rows written before the
// start and after it are sent, in each aggregate's order, and marked sent
// in the renamed status column.
func TestRunRenamedColumnsPolling(t *testing.T) {
	t.Parallel()
	pool, stream, cfg := pollingEvents(t)
	require.NoError(t, cfg.Validate())
	ids := writeEvents(t, pool, 0, 5)
	_, _, stop := startLogged(t, cfg)
	ids = append(ids, writeEvents(t, pool, 5, 10)...)
	checkEventsSent(t, pool, stream, ids)
	require.NoError(t, stop())
}

// TestRunRenamedColumnsPollingMissingColumnFails: with source polling, a
// mapping that names a column the table lacks stops the start, with the
// mapping and the table's columns.
func TestRunRenamedColumnsPollingMissingColumnFails(t *testing.T) {
	t.Parallel()
	_, _, cfg := pollingEvents(t)
	cfg.Columns["retry_count"] = "attempts" // the table has tries
	require.NoError(t, cfg.Validate())
	runFails(t, cfg, "check table", "retry_count -> attempts", "retry_count: attempts",
		"the table has: body, changed_at, due_at, entity, event_id, kind, name, seq, state, tries, written_at")
}

// runFails runs a daemon on cfg and checks that its start fails with every
// one of want in the error.
func runFails(t *testing.T, cfg *config.Config, want ...string) {
	t.Helper()
	d, err := New(cfg, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = d.Run(ctx)
	require.Error(t, err)
	for _, s := range want {
		require.ErrorContains(t, err, s)
	}
}

// pollingEvents returns a config of source polling on table events
// (renamedEvents), in a schema of its own, publishing to stream.
func pollingEvents(t *testing.T) (*pgxpool.Pool, *natsStream, *config.Config) {
	pool, _, dsn := testsvc.PostgresSchema(t)
	stream := newNATSStream(t)
	cfg := baseConfig(config.NewSecret(dsn), stream.broker("events"))
	cfg.Table, cfg.Source, cfg.Columns = "events", config.SourcePolling, renamedEvents(t, pool)
	return pool, stream, cfg
}

// renamedEvents creates table events, whose columns all have other names
// than the contract's, and returns its mapping.
func renamedEvents(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	_, err := pool.Exec(context.Background(), `CREATE TABLE events (
    seq bigserial PRIMARY KEY, event_id text NOT NULL UNIQUE, kind text NOT NULL, entity text NOT NULL,
    name text NOT NULL, body jsonb NOT NULL, state smallint NOT NULL DEFAULT 0, tries int NOT NULL DEFAULT 0,
    due_at timestamptz, written_at timestamptz NOT NULL DEFAULT now(), changed_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	return map[string]string{"id": "seq", "message_id": "event_id", "aggregate_type": "kind", "aggregate_id": "entity",
		"event_type": "name", "payload": "body", "status": "state", "retry_count": "tries", "next_retry_at": "due_at",
		"created_at": "written_at", "updated_at": "changed_at"}
}

// writeEvents inserts events e-from .. e-(to-1) into table events by plain
// SQL, in two aggregates, and returns their ids.
func writeEvents(t *testing.T, pool *pgxpool.Pool, from, to int) []string {
	t.Helper()
	var ids []string
	for i := from; i < to; i++ {
		id := fmt.Sprintf("e-%d", i)
		_, err := pool.Exec(context.Background(),
			`INSERT INTO events (event_id, kind, entity, name, body) VALUES ($1, 'order', $2, 'ORDER_PAID', '{"a":1}')`, id, fmt.Sprint(i%2))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

// checkEventsSent waits for the events ids in the stream, checks each
// aggregate's came in write order, and that their rows are marked sent in
// the renamed status column.
func checkEventsSent(t *testing.T, pool *pgxpool.Pool, stream *natsStream, ids []string) {
	t.Helper()
	testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == uint64(len(ids)) }, "the messages are not sent")
	got := stream.messageIDs(t)
	require.ElementsMatch(t, ids, got)
	for agg := range 2 { // each aggregate's in write order
		var want, seen []string
		for i, id := range ids {
			if i%2 == agg {
				want = append(want, id)
			}
		}
		for _, id := range got {
			if slices.Contains(want, id) {
				seen = append(seen, id)
			}
		}
		require.Equal(t, want, seen)
	}
	testsvc.Eventually(t, 10*time.Second, func() bool {
		var sent int
		return pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE state = 1`).Scan(&sent) == nil &&
			sent == len(ids)
	}, "rows not marked sent in the renamed column")
}

// TestRunColumnsMissingColumnFails: a mapping that names a column the table
// lacks stops the start, with the mapping and the table's columns.
func TestRunColumnsMissingColumnFails(t *testing.T) {
	t.Parallel()
	pool, schema, dsn := testsvc.PostgresSchema(t)
	stream := newNATSStream(t)
	slot, pub := testsvc.ReplicationSlot(t, schema)
	_, err := pool.Exec(context.Background(), `CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
    aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)`)
	require.NoError(t, err)
	cfg := baseConfig(config.NewSecret(dsn), stream.broker("events"))
	cfg.Table, cfg.Source, cfg.CDCSlot, cfg.CDCPublication = "outbox", config.SourceCDC, slot, pub
	cfg.Columns = map[string]string{"message_id": "id", "aggregate_type": "aggregate_type", "aggregate_id": "aggregateid",
		"event_type": "type", "payload": "payload"}
	runFails(t, cfg, "check table", "aggregate_type -> aggregate_type",
		"{message_id: id, aggregate_type: aggregate_type, aggregate_id: aggregateid, event_type: type, payload: payload}",
		"the table has: aggregateid, aggregatetype, id, payload, type")
}
