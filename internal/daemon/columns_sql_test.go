package daemon

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// TestRunRenamedColumnsPollingSQL runs the daemon with source polling on a
// MariaDB and on a SQLite table whose columns all have other names, written
// to by plain SQL: the rows written before the start and after it are sent and marked
// sent in the renamed status column.
func TestRunRenamedColumnsPollingSQL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (*sql.DB, config.Secret)
		ddl  string
	}{
		{"MySQL", func(t *testing.T) (*sql.DB, config.Secret) {
			db, dsn := testsvc.MySQLDatabase(t)
			return db, config.NewSecret(mysqlURL(t, dsn))
		}, `CREATE TABLE events (
    seq BIGINT AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(64) NOT NULL UNIQUE, kind VARCHAR(255) NOT NULL,
    entity VARCHAR(255) NOT NULL, name VARCHAR(255) NOT NULL, body JSON NOT NULL, state SMALLINT NOT NULL DEFAULT 0,
    tries INT NOT NULL DEFAULT 0, due_at DATETIME(6) NULL, written_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    changed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), KEY events_due (state, due_at))`},
		{"SQLite", func(t *testing.T) (*sql.DB, config.Secret) {
			path := filepath.Join(t.TempDir(), "events.db")
			db, err := sqlitestore.Open(path)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			return db, config.NewSecret("sqlite://" + path)
		}, `CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, entity TEXT NOT NULL,
    name TEXT NOT NULL, body TEXT NOT NULL, state INTEGER NOT NULL DEFAULT 0, tries INTEGER NOT NULL DEFAULT 0,
    due_at TEXT, written_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    changed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, url := tc.open(t)
			ctx := context.Background()
			_, err := db.ExecContext(ctx, tc.ddl)
			require.NoError(t, err)
			stream := newNATSStream(t)
			cfg := baseConfig(url, stream.broker("events"))
			cfg.Table, cfg.Source = "events", config.SourcePolling
			cfg.Columns = map[string]string{"id": "seq", "message_id": "event_id", "aggregate_type": "kind",
				"aggregate_id": "entity", "event_type": "name", "payload": "body", "status": "state",
				"retry_count": "tries", "next_retry_at": "due_at", "created_at": "written_at", "updated_at": "changed_at"}
			require.NoError(t, cfg.Validate())
			write := func(from, to int) []string {
				var ids []string
				for i := from; i < to; i++ {
					id := fmt.Sprintf("e-%d", i)
					_, err := db.ExecContext(ctx, `INSERT INTO events (event_id, kind, entity, name, body)
VALUES (?, 'order', ?, 'ORDER_PAID', '{"a":1}')`, id, fmt.Sprint(i%2))
					require.NoError(t, err)
					ids = append(ids, id)
				}
				return ids
			}
			ids := write(0, 5)
			_, _, stop := startLogged(t, cfg)
			ids = append(ids, write(5, 10)...)
			testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == uint64(len(ids)) },
				"the messages are not sent")
			require.ElementsMatch(t, ids, stream.messageIDs(t))
			testsvc.Eventually(t, 10*time.Second, func() bool {
				var sent int
				return db.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE state = 1`).Scan(&sent) == nil &&
					sent == len(ids)
			}, "rows not marked sent in the renamed column")
			require.NoError(t, stop())
		})
	}
}
