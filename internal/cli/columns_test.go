package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testsvc"
)

// TestMigrateLeavesAMappedTable: with a columns: mapping, migrate does not
// add the contract's columns to the table of its own layout.
func TestMigrateLeavesAMappedTable(t *testing.T) {
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
}
