package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testsvc"
)

// TestMappedTableCommands: with a columns: mapping, migrate does not
// add the contract's columns to the table of its own layout, and status,
// dead and archive, which read the state columns, refuse a log-only table
// with a hint.
func TestMappedTableCommands(t *testing.T) {
	t.Parallel()
	pool, _, dsn := testsvc.PostgresSchema(t)
	_, err := pool.Exec(t.Context(), `CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
    aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)`)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`table: outbox
source: cdc
columns: {message_id: id, aggregate_type: aggregatetype, aggregate_id: aggregateid, event_type: type, payload: payload}
`), 0o600))
	r := run(t.Context(), "migrate", "--config", path, "--db", dsn)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Equal(t, "table outbox has a columns: mapping: left as it is\n", r.stdout)
	rows, err := pool.Query(t.Context(), `SELECT attname FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attnum > 0 ORDER BY attnum`)
	require.NoError(t, err)
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"id", "aggregatetype", "aggregateid", "type", "payload"}, cols)

	// The commands that read the table through the polling store refuse it.
	for _, tc := range []struct{ name, flags []string }{
		{[]string{"status"}, nil}, {[]string{"dead", "list"}, nil}, {[]string{"archive"}, []string{"--older-than", "7d"}},
	} {
		name := strings.Join(tc.name, " ")
		r := run(t.Context(), append(append(tc.name, tc.flags...), "--config", path, "--db", dsn)...)
		require.Equal(t, ExitUsage, r.code, "%s: %s", name, r.stderr)
		require.Contains(t, requireOneLine(t, r), name+" reads the rows' state columns, and table outbox "+
			"has a log-only columns: mapping (none); its dead messages are in outbox_dead: outbox "+name+" --db URL --table outbox_dead")
	}
}

// TestMappedTableCommandsKeptState: status, dead list and dead retry read
// and change a table whose state columns have other names through its
// columns: mapping.
func TestMappedTableCommandsKeptState(t *testing.T) {
	t.Parallel()
	pool, _, dsn := testsvc.PostgresSchema(t)
	_, err := pool.Exec(t.Context(), `CREATE TABLE events (
    seq bigserial PRIMARY KEY, event_id text NOT NULL UNIQUE, kind text NOT NULL, entity text NOT NULL,
    name text NOT NULL, body jsonb NOT NULL, state smallint NOT NULL DEFAULT 0, tries int NOT NULL DEFAULT 0,
    due_at timestamptz, written_at timestamptz NOT NULL DEFAULT now(), changed_at timestamptz NOT NULL DEFAULT now());
INSERT INTO events (event_id, kind, entity, name, body, state, tries) VALUES
    ('e-1', 'order', 'o-1', 'ORDER_PAID', '{}', 2, 5), ('e-2', 'order', 'o-2', 'ORDER_PAID', '{}', 0, 0)`)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`table: events
columns: {id: seq, message_id: event_id, aggregate_type: kind, aggregate_id: entity, event_type: name, payload: body,
  status: state, retry_count: tries, next_retry_at: due_at, created_at: written_at, updated_at: changed_at}
`), 0o600))
	r := run(t.Context(), "status", "--config", path, "--db", dsn)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^pending\s+1\b`, r.stdout)
	require.Regexp(t, `(?m)^dead\s+1\b`, r.stdout)
	r = run(t.Context(), "dead", "list", "--config", path, "--db", dsn)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "e-1")
	require.NotContains(t, r.stdout, "e-2")
	r = run(t.Context(), "dead", "retry", "--yes", "--config", path, "--db", dsn)
	require.Equal(t, ExitOK, r.code, r.stderr)
	var state, tries int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT state, tries FROM events WHERE event_id = 'e-1'`).Scan(&state, &tries))
	require.Equal(t, []int{0, 0}, []int{state, tries}, "retried in the renamed columns")
}
