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

// eachRead runs f once with a migrated Store whose ordered claims read
// their runs by the front scan on every claim, and once with one that
// reads them per aggregate (front.go); the contract's table has no
// (status, id) index and reads per aggregate either way.
func eachRead(t *testing.T, f func(t *testing.T, migrated func(*testing.T) (*Store, *sql.DB))) {
	for _, tc := range []struct {
		name   string
		policy frontPolicy
	}{{"FrontScan", frontAlways}, {"PerAggregate", frontNever}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f(t, func(t *testing.T) (*Store, *sql.DB) {
				s, db := orderedStore(t)
				s.front = tc.policy
				return s, db
			})
		})
	}
}

// TestRunsClaim checks what ends a run (sqltest.RunsClaim), and on MySQL
// also a row locked by a concurrent claim.
func TestRunsClaim(t *testing.T) {
	t.Parallel()
	eachRead(t, func(t *testing.T, migrated func(*testing.T) (*Store, *sql.DB)) { runsClaim(t, migrated) })
}

func runsClaim(t *testing.T, migrated func(*testing.T) (*Store, *sql.DB)) {
	sqltest.RunsClaim(t, migrated, contractStore, sqltest.RunsCase{
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
	eachRead(t, func(t *testing.T, migrated func(*testing.T) (*Store, *sql.DB)) {
		sqltest.RunsConcurrent(t, migrated, contractStore, nil)
	})
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
		writeSentThenPending(t, db, 4000)
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
		got, read := readCost(t, db, s.runsSQL(info, p, 3), args...)
		require.Equal(t, 6, got, "two pending rows of each aggregate")
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
	eachRead(t, func(t *testing.T, migrated func(*testing.T) (*Store, *sql.DB)) { runsClaimChains(t, migrated) })
}

func runsClaimChains(t *testing.T, migrated func(*testing.T) (*Store, *sql.DB)) {
	runcheck.BothTables(t, migrated, contractStore, func(t *testing.T, s *Store, db *sql.DB) {
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
	eachRead(t, func(t *testing.T, migrated func(*testing.T) (*Store, *sql.DB)) { runsReadCommitted(t, migrated) })
}

func runsReadCommitted(t *testing.T, migrated func(*testing.T) (*Store, *sql.DB)) {
	for _, blockOnDead := range []bool{true, false} {
		t.Run(fmt.Sprintf("BlockOnDead=%v", blockOnDead), func(t *testing.T) {
			t.Parallel()
			runcheck.BothTables(t, migrated, contractStore, func(t *testing.T, s *Store, db *sql.DB) {
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
