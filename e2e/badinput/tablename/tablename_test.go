// Package tablename_test checks that the outbox command refuses table names
// that carry SQL before it touches a database. It is apart from package
// badinput_test because it builds the whole command line (internal/cli).
package tablename_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/cli"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// hostileTables are table names that carry SQL, quotes, comments or too
// many parts. The CLI must refuse each one before it reaches a database.
var hostileTables = []string{
	"x; DROP TABLE canary",
	"canary; --",
	"outbox_message WHERE 1=1",
	`outbox"; DROP TABLE canary; --`,
	"outbox`; DROP TABLE canary; --",
	"outbox'--",
	"outbox/**/message",
	"a.b.c",
	"public.",
	".outbox",
	"outbox message",
	"outbox\x00message",
	"outbox\nmessage",
	"øutbox",
	strings.Repeat("a", 65), // too long everywhere (MySQL takes 64 characters, the others 63)
}

// TestHostileTableNamesThroughTheCLI runs `outbox migrate` (the command that
// creates tables) with each hostile name against PostgreSQL, MariaDB and
// SQLite: it exits with the usage code and one line naming the problem, and
// the database is untouched (the canary table is still there, and nothing
// else was created).
func TestHostileTableNamesThroughTheCLI(t *testing.T) {
	t.Parallel()
	type db struct {
		url    string
		tables func() []string // the tables in the test's schema or database
	}
	dbs := map[string]func(t *testing.T) db{
		"postgres": func(t *testing.T) db {
			pool, schema, dsn := testsvc.PostgresSchema(t)
			_, err := pool.Exec(context.Background(), "CREATE TABLE canary (id int)")
			require.NoError(t, err)
			return db{url: dsn, tables: func() []string {
				rows, err := pool.Query(context.Background(),
					"SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1", schema)
				require.NoError(t, err)
				defer rows.Close()
				var out []string
				for rows.Next() {
					var n string
					require.NoError(t, rows.Scan(&n))
					out = append(out, n)
				}
				return out
			}}
		},
		"mysql": func(t *testing.T) db {
			conn, dsn := testsvc.MySQLDatabase(t)
			_, err := conn.Exec("CREATE TABLE canary (id int)")
			require.NoError(t, err)
			cfg, err := mysql.ParseDSN(dsn)
			require.NoError(t, err)
			url := fmt.Sprintf("mysql://%s@%s/%s", cfg.User, cfg.Addr, cfg.DBName)
			return db{url: url, tables: func() []string {
				rows, err := conn.Query("SHOW TABLES")
				require.NoError(t, err)
				defer rows.Close()
				var out []string
				for rows.Next() {
					var n string
					require.NoError(t, rows.Scan(&n))
					out = append(out, n)
				}
				return out
			}}
		},
		"sqlite": func(t *testing.T) db {
			path := testsvc.SQLitePath(t)
			conn, err := sqlitestore.Open(path)
			require.NoError(t, err)
			t.Cleanup(func() { conn.Close() })
			_, err = conn.Exec("CREATE TABLE canary (id int)")
			require.NoError(t, err)
			return db{url: "sqlite://" + path, tables: func() []string {
				rows, err := conn.Query("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY 1")
				require.NoError(t, err)
				defer rows.Close()
				var out []string
				for rows.Next() {
					var n string
					require.NoError(t, rows.Scan(&n))
					out = append(out, n)
				}
				return out
			}}
		},
	}
	for name, newDB := range dbs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			for _, table := range hostileTables {
				var stdout, stderr bytes.Buffer
				code := cli.Main(t.Context(), []string{"outbox", "migrate", "--db", d.url, "--table", table}, &stdout, &stderr)
				require.Equal(t, cli.ExitUsage, code, "%q: stderr %s", table, stderr.String())
				line := strings.TrimSuffix(stderr.String(), "\n")
				require.NotContains(t, line, "\n", "%q: one line", table)
				require.True(t, strings.HasPrefix(line, "outbox: table: "), "%q: %s", table, line)
				require.Contains(t, line, "is not a valid table name", table)
				require.Empty(t, stdout.String(), table)
				require.Equal(t, []string{"canary"}, d.tables(), "%q: the database is untouched", table)
			}
		})
	}
}
