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
// dead and archive, which read the contract's names, refuse it with a hint.
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
		require.Contains(t, requireOneLine(t, r), name+" reads the table contract's column names, and table outbox "+
			"has a columns: mapping; its dead messages are in outbox_dead: outbox "+name+" --db URL --table outbox_dead")
	}
}
