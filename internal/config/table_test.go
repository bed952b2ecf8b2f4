package config_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// tableNames are the names TestTableRulesMatchStores tries on every
// database: ordinary ones and each edge of the stores' rules (case, length,
// parts, reserved prefixes, characters that would need quoting).
var tableNames = []string{
	"outbox_message", "_outbox", "outbox2", "app.outbox_message", "app_1.x",
	"Outbox", "OUTBOX", "App.outbox", "app.Outbox", "outBox",
	"", ".", ".outbox", "outbox.", "a.b.c", "1outbox", "app.1outbox",
	"out-box", "out box", "outbox;", `out"box`, "out`box", "outbox\x00", "ünïcode", "$outbox",
	strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65), strings.Repeat("A", 64),
	strings.Repeat("a", 63) + "." + strings.Repeat("b", 63), strings.Repeat("a", 64) + ".b",
	"sqlite_outbox", "SQLite_outbox", "app.sqlite_outbox", "sqlite_app.outbox", "sqlite",
}

// TestTableRulesMatchStores requires config validation to accept exactly
// the table names the store of each database accepts: a name the store
// refuses must be a config error (exit code 2 before anything starts), and
// a name the store takes must not be refused by the config. The stores are
// built on handles that never connect.
func TestTableRulesMatchStores(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://u@127.0.0.1:1/db") // lazy: never dialled
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	sqlDB, err := sql.Open("sqlite", "file::memory:")
	require.NoError(t, err)
	t.Cleanup(func() { sqlDB.Close() })

	for _, tc := range []struct {
		db       string
		newStore func(table string) error
	}{
		{"postgres://u@h/db", func(table string) error { _, err := pgstore.New(pool, pgstore.WithTable(table)); return err }},
		{"postgresql://u@h/db", func(table string) error { _, err := pgstore.New(pool, pgstore.WithTable(table)); return err }},
		{"mysql://u@h:3306/db", func(table string) error {
			_, err := mysqlstore.New(sqlDB, mysqlstore.WithTable(table))
			return err
		}},
		{"sqlite://x.db", func(table string) error {
			_, err := sqlitestore.New(sqlDB, sqlitestore.WithTable(table))
			return err
		}},
	} {
		for _, name := range tableNames {
			c := config.Default()
			c.DB, c.Table = config.NewSecret(tc.db), name
			cfgErr := c.ValidateDB()
			storeErr := tc.newStore(name)
			require.Equal(t, storeErr == nil, cfgErr == nil,
				"%s table %q: store says %v, config says %v", tc.db, name, storeErr, cfgErr)
			if cfgErr != nil {
				require.ErrorContains(t, cfgErr, "table: ", "%s table %q", tc.db, name)
			}
		}
	}
}
