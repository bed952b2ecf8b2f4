package pgstore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
)

func TestArchiveKeepsEveryColumn(t *testing.T) {
	t.Parallel()
	pool, schema, _ := testsvc.PostgresSchema(t)
	s := newStore(t, pool, pgstore.WithTable(schema+".events"))
	require.Equal(t, schema+".events_archive", s.ArchiveTable())
	ctx := t.Context()
	m := msg("1")
	m.Headers, m.Topic, m.PartitionKey = map[string]string{"k": "v"}, "topic-1", "key-1"
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.NewWriter(s).Write(ctx, tx, m) }))
	c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 1, Lease: time.Minute})
	require.NoError(t, err)
	n, err := s.Ack(ctx, outbox.AckParams{Messages: c.Messages})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	const cols = `id, message_id, aggregate_type, aggregate_id, event_type, payload::text, status, retry_count,
		next_retry_at, created_at, updated_at, headers::text, topic, partition_key, last_error`
	values := func(table string) [][]any {
		rows, err := pool.Query(ctx, "SELECT "+cols+" FROM "+table)
		require.NoError(t, err)
		all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		require.NoError(t, err)
		return all
	}
	want := values("events")
	require.Len(t, want, 1)

	moved, err := s.Archive(ctx, outbox.ArchiveParams{OlderThan: 0, Batch: 10})
	require.NoError(t, err)
	require.EqualValues(t, 1, moved)
	require.Equal(t, want, values("events_archive"), "the archived row is the row, column for column")
	require.Zero(t, count(t, pool, "SELECT count(*) FROM events"))
}

func TestArchiveAfterUpgrade(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	exec(t, pool, fmt.Sprintf(contractDDL, "outbox_message", "jsonb", "timestamptz"))
	ctx := t.Context()
	s, err := pgstore.New(pool)
	require.NoError(t, err)
	archiveOne := func(aggID string) {
		t.Helper()
		m := msg(aggID)
		m.Headers = map[string]string{"k": aggID}
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.NewWriter(s).Write(ctx, tx, m) }))
		c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 1, Lease: time.Minute})
		require.NoError(t, err)
		_, err = s.Ack(ctx, outbox.AckParams{Messages: c.Messages})
		require.NoError(t, err)
		n, err := s.Archive(ctx, outbox.ArchiveParams{Batch: 10})
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
	}
	archiveOne("before") // the archive table gets the contract columns only
	require.NoError(t, s.Migrate(ctx))
	archiveOne("after") // now it needs headers too
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM outbox_message_archive WHERE headers->>'k' = 'after'`))
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM outbox_message_archive WHERE headers IS NULL AND aggregate_id = 'before'`))
}

func TestDeadAdminInBatches(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	s := newStore(t, pool)
	ctx := t.Context()
	msgs := make([]*outbox.Message, 2500)
	for i := range msgs {
		msgs[i] = msg(fmt.Sprint(i))
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.NewWriter(s).Write(ctx, tx, msgs...) }))
	exec(t, pool, `UPDATE outbox_message SET status = 2, last_error = 'x'`)

	n, err := s.RetryDead(ctx, outbox.DeadFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 2500, n)
	require.Equal(t, 2500, count(t, pool, `SELECT count(*) FROM outbox_message WHERE status = 0 AND retry_count = 0`))

	exec(t, pool, `UPDATE outbox_message SET status = 2`)
	n, err = s.DiscardDead(ctx, outbox.DeadFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 2500, n)
	require.Zero(t, count(t, pool, `SELECT count(*) FROM outbox_message`))

	list, err := s.ListDead(ctx, outbox.DeadFilter{Limit: 1 << 30})
	require.NoError(t, err)
	require.Empty(t, list)
}

func TestDeadAdminOnContractTable(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	exec(t, pool, fmt.Sprintf(contractDDL, "legacy", "jsonb", "timestamptz"))
	exec(t, pool, `INSERT INTO legacy (message_id, aggregate_type, aggregate_id, event_type, payload, status)
		VALUES ('ok', 'order', '1', 'E', '{}', 2), (NULL, 'order', NULL, 'E', NULL, 2)`)
	s, err := pgstore.New(pool, pgstore.WithTable("legacy"))
	require.NoError(t, err)

	list, err := s.ListDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err)
	require.Len(t, list, 2, "malformed dead rows are listed too")
	require.Equal(t, "ok", list[0].Message.MessageID)
	require.Empty(t, list[0].Reason, "no last_error column")
	require.Empty(t, list[1].Message.MessageID)
	require.Nil(t, list[1].Message.Payload)

	_, err = s.ListDead(t.Context(), outbox.DeadFilter{ErrorContains: "x"})
	require.ErrorContains(t, err, "no last_error column")
}

func TestArchiveTableNameIsShortened(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	long := strings.Repeat("z", 60)
	s, err := pgstore.New(pool, pgstore.WithTable(long))
	require.NoError(t, err)
	name := s.ArchiveTable()
	require.LessOrEqual(t, len(name), 63)
	require.True(t, strings.HasSuffix(name, "_archive"), name)
	require.NotEqual(t, long, name)
}
