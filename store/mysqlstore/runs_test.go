package mysqlstore

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/runcheck"
	"github.com/outboxkit/outbox/store/internal/sqltest"
)

// contractStore returns a Store on a table of the test's own with only the
// contract's columns and indexes (the seed's DDL).
func contractStore(t *testing.T) (*Store, *sql.DB) {
	t.Helper()
	return sqltest.OnTable(t, New, testDB(t), `CREATE TABLE outbox_message (
		id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(64) NOT NULL UNIQUE,
		aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL,
		payload JSON NOT NULL, status TINYINT NOT NULL DEFAULT 0, retry_count INT NOT NULL DEFAULT 0,
		next_retry_at DATETIME(6) NULL, created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
		updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
		INDEX (status, next_retry_at), INDEX (aggregate_type, aggregate_id)) ENGINE = InnoDB`)
}

// bothTables runs f on a migrated table and on one with only the contract's indexes.
func bothTables(t *testing.T, f func(t *testing.T, s *Store, db *sql.DB)) {
	runcheck.BothTables(t, orderedStore, contractStore, f)
}

// TestRunsClaim checks what ends a run (sqltest.RunsClaim), and on MySQL
// also a row locked by a concurrent claim.
func TestRunsClaim(t *testing.T) {
	t.Parallel()
	sqltest.RunsClaim(t, orderedStore, contractStore, sqltest.RunsCase{
		Name: "LockedByAConcurrentClaim", Limit: 10, Want: []string{"a#0", "b#0", "b#1", "c#0"},
		Block: func(t *testing.T, s outbox.Store, db *sql.DB, a []*outbox.Message) func() {
			sqltest.Reschedule(t, s, a[0], time.Now().Add(-time.Minute)) // due again
			tx, err := db.BeginTx(t.Context(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			require.NoError(t, err)
			var id int64
			require.NoError(t, tx.QueryRowContext(t.Context(), "SELECT id FROM outbox_message WHERE message_id = 'a-1' FOR UPDATE").Scan(&id))
			return func() { require.NoError(t, tx.Rollback()) }
		}})
}

// TestRunsLeaveRoomForOthers: see sqltest.RunsLeaveRoomForOthers.
func TestRunsLeaveRoomForOthers(t *testing.T) {
	t.Parallel()
	sqltest.RunsLeaveRoomForOthers(t, orderedStore, contractStore)
}

// TestRunsClaimConcurrent: see sqltest.RunsConcurrent.
func TestRunsClaimConcurrent(t *testing.T) {
	t.Parallel()
	sqltest.RunsConcurrent(t, orderedStore, contractStore, nil)
}

// TestRunsReadSkipsSentRows runs the read of runs (runsSQL) with ANALYZE on
// a table that keeps 4,000 sent rows of the same aggregates before 1,000
// pending ones: it must read the pending rows in front of the claim, not
// the aggregates' history, on both tables (the head index; the contract's
// (status, next_retry_at) index).
func TestRunsReadSkipsSentRows(t *testing.T) {
	t.Parallel()
	bothTables(t, func(t *testing.T, s *Store, db *sql.DB) {
		ctx := t.Context()
		_, err := db.ExecContext(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, status)
			WITH d(n) AS (SELECT 0 UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
				UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9),
			n(i) AS (SELECT 1 + a.n + 10 * b.n + 100 * c.n + 1000 * e.n FROM d AS a, d AS b, d AS c, d AS e)
			SELECT CONCAT('m', i), 'order', CONCAT('a', i % 50), 'E', '{}', IF(i <= 4000, 1, 0) FROM n WHERE i <= 5000 ORDER BY i`)
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, "ANALYZE TABLE outbox_message")
		require.NoError(t, err)
		info, err := s.tableInfo(ctx, db)
		require.NoError(t, err)
		p := outbox.ClaimParams{Limit: 10, Ordered: true, BlockOnDead: true}
		// Three aggregates, each up to its second pending row.
		var args []any
		for range runsParts(info, p) {
			args = append(args, 4053)
			for _, agg := range []int{1, 2, 3} {
				args = append(args, "order", fmt.Sprint("a", agg))
			}
		}
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.ExecContext(ctx, "FLUSH STATUS")
		require.NoError(t, err)
		rows, err := conn.QueryContext(ctx, s.runsSQL(info, p, 3), args...)
		require.NoError(t, err)
		got := 0
		for rows.Next() {
			got++
		}
		require.NoError(t, rows.Err())
		rows.Close()
		require.Equal(t, 6, got, "two pending rows of each aggregate")
		// Index entries and rows read, by every access method.
		var read float64
		require.NoError(t, conn.QueryRowContext(ctx, `SELECT SUM(variable_value) FROM information_schema.session_status
			WHERE variable_name IN ('HANDLER_READ_FIRST', 'HANDLER_READ_KEY', 'HANDLER_READ_NEXT', 'HANDLER_READ_PREV', 'HANDLER_READ_RND', 'HANDLER_READ_RND_NEXT')`).Scan(&read))
		t.Logf("read %v", read)
		require.LessOrEqual(t, read, 150.0, "index entries and rows the read of runs read")
	})
}

// TestRunsClaimChains checks ClaimParams.Chain on both tables: rows of an
// aggregate that follow rows the relay holds (its batches in flight) come
// back only when the claim names those rows in Chain, the named rows are not
// claimed again, a leased row the claim does not name still ends the run,
// and a run is at most a quarter of the limit.
func TestRunsClaimChains(t *testing.T) {
	t.Parallel()
	bothTables(t, func(t *testing.T, s *Store, db *sql.DB) {
		sqltest.WriteAgg(t, s, db, "a", 7)
		claim := func(limit int, chain ...*outbox.Message) ([]string, []*outbox.Message) {
			t.Helper()
			return runcheck.ClaimChained(t, s, limit, chain...)
		}
		got, first := claim(8)
		require.Equal(t, []string{"a#0", "a#1"}, got, "a run of two: a quarter of the limit")
		got, _ = claim(8)
		require.Empty(t, got, "a#0 and a#1 are leased: without them in Chain nothing follows")
		got, _ = claim(8, first[1])
		require.Empty(t, got, "a#0 is leased and not in Chain: it ends the run")
		got, second := claim(8, first...)
		require.Equal(t, []string{"a#2", "a#3"}, got, "chained after a#0 and a#1, a quarter of the limit")
		got, _ = claim(8, append(first, second...)...)
		require.Equal(t, []string{"a#4", "a#5"}, got, "chained after both batches")
	})
}

// TestRunsReadCommitted: a claim reads its runs at READ COMMITTED (the
// store's transactions; runs.go says why), on both tables and under both dead-row policies, so a row
// inserted by a transaction still open does not hold back the later row of
// its aggregate that another transaction committed first: order follows
// commit order (docs/ordering.md, "Commit order"). A claim that read rows not
// yet committed would hold it back, and could miss a row that a kill or a
// retry moves (runcheck's kills show that).
func TestRunsReadCommitted(t *testing.T) {
	t.Parallel()
	for _, blockOnDead := range []bool{true, false} {
		t.Run(fmt.Sprintf("BlockOnDead=%v", blockOnDead), func(t *testing.T) {
			t.Parallel()
			bothTables(t, func(t *testing.T, s *Store, db *sql.DB) {
				ctx := t.Context()
				w := outbox.NewWriter[*sql.Tx](s)
				write := func(n int) *sql.Tx {
					t.Helper()
					tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
					require.NoError(t, err)
					require.NoError(t, w.Write(ctx, tx, &outbox.Message{AggregateType: "order", AggregateID: "a",
						EventType: "E", Payload: []byte(fmt.Sprintf(`{"n":%d}`, n))}))
					return tx
				}
				open := write(0)
				defer open.Rollback()                 //nolint:errcheck // a no-op after Commit
				require.NoError(t, write(1).Commit()) // the later row commits first
				c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Minute, Ordered: true,
					BlockOnDead: blockOnDead})
				require.NoError(t, err)
				var got []string
				for _, m := range c.Messages {
					got = append(got, string(m.Payload))
				}
				require.Equal(t, []string{`{"n":1}`}, got, "the open row is not read")
				require.NoError(t, open.Commit())
			})
		})
	}
}
