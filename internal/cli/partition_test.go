package cli

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgstore"
)

// TestPartitionedPostgresTable is the recipe of docs/operations.md,
// "Partitioned outbox table (PostgreSQL)": a table partitioned by
// created_at, upgraded by `outbox migrate`, relayed unchanged, and an old
// partition dropped instead of archiving its rows.
func TestPartitionedPostgresTable(t *testing.T) {
	t.Parallel()
	pool, _, dsn := testsvc.PostgresSchema(t)
	ctx := t.Context()
	today := time.Now().UTC().Truncate(24 * time.Hour)
	day := func(d time.Time) string { return d.Format(time.DateOnly) }
	for _, stmt := range []string{
		`CREATE TABLE outbox_message (
			id             bigserial    NOT NULL,
			message_id     varchar(64)  NOT NULL,
			aggregate_type varchar(64)  NOT NULL,
			aggregate_id   varchar(64)  NOT NULL,
			event_type     varchar(64)  NOT NULL,
			payload        jsonb        NOT NULL,
			status         smallint     NOT NULL DEFAULT 0,
			retry_count    integer      NOT NULL DEFAULT 0,
			next_retry_at  timestamptz  NULL,
			created_at     timestamptz  NOT NULL DEFAULT now(),
			updated_at     timestamptz  NOT NULL DEFAULT now(),
			PRIMARY KEY (id, created_at),
			UNIQUE (message_id, created_at)
		) PARTITION BY RANGE (created_at)`,
		fmt.Sprintf(`CREATE TABLE outbox_message_old PARTITION OF outbox_message FOR VALUES FROM ('%s') TO ('%s')`,
			day(today.AddDate(0, 0, -30)), day(today.AddDate(0, 0, -1))),
		fmt.Sprintf(`CREATE TABLE outbox_message_now PARTITION OF outbox_message FOR VALUES FROM ('%s') TO ('%s')`,
			day(today.AddDate(0, 0, -1)), day(today.AddDate(0, 0, 2))),
		// Old, sent rows: what dropping a partition removes.
		fmt.Sprintf(`INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, status, created_at, updated_at)
			SELECT 'old-' || g, 'order', g::text, 'ORDER_PAID', '{}', 1, '%[1]s', '%[1]s' FROM generate_series(1, 4) g`,
			day(today.AddDate(0, 0, -10))),
	} {
		_, err := pool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	r := run(ctx, "migrate", "--db", dsn)
	require.Equal(t, ExitOK, r.code, "migrate adds the optional columns and indexes to a partitioned table: %s", r.stderr)

	s, err := pgstore.New(pool)
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter(s).Write(ctx, tx, messagesOf("FRESH", 6)...))
	require.NoError(t, tx.Commit(ctx))

	pub := outboxtest.NewPublisher()
	relay, err := outbox.NewRelay(s, pub, outbox.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	n, err := outboxtest.FlushAndWait(fctx, relay, s)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	require.Equal(t, 6, delivered(pub, "FRESH"))
	st := statusOf(t, "--db", dsn)
	require.Zero(t, st.Pending)
	require.EqualValues(t, 6, st.SentLastMinute)

	// Dropping the old partition removes its rows at once, no row-by-row delete.
	_, err = pool.Exec(ctx, `DROP TABLE outbox_message_old`)
	require.NoError(t, err)
	require.Equal(t, 6, countPG(t, pool, "outbox_message"))

	// The trade-off: message_id is unique only together with created_at.
	_, err = pool.Exec(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, status, created_at)
		SELECT message_id, aggregate_type, aggregate_id, event_type, payload, 1, created_at + interval '1 second'
		FROM outbox_message LIMIT 1`)
	require.NoError(t, err, "a second row with the same message_id is accepted")

	// archive still works on it, for rows of partitions not yet dropped.
	r = run(ctx, "archive", "--db", dsn, "--older-than", "0s", "--batch", "4")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Zero(t, countPG(t, pool, "outbox_message"))
	require.Equal(t, 7, countPG(t, pool, s.ArchiveTable()))
}
