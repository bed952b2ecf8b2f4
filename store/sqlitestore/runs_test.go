package sqlitestore

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/runcheck"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// contractStore returns a Store on a database file of the test's own, on a
// table with only the contract's columns and indexes.
func contractStore(t *testing.T) (*Store, *sql.DB) {
	t.Helper()
	db, err := Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{`CREATE TABLE outbox_message (
		id INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT NOT NULL UNIQUE, aggregate_type TEXT NOT NULL,
		aggregate_id TEXT NOT NULL, event_type TEXT NOT NULL, payload TEXT NOT NULL, status INTEGER NOT NULL DEFAULT 0,
		retry_count INTEGER NOT NULL DEFAULT 0, next_retry_at TEXT, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
		updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
		"CREATE INDEX outbox_status ON outbox_message (status, next_retry_at)",
		"CREATE INDEX outbox_aggregate ON outbox_message (aggregate_type, aggregate_id)",
	} {
		_, err = db.Exec(q)
		require.NoError(t, err)
	}
	s, err := New(db)
	require.NoError(t, err)
	return s, db
}

// bothTables runs f on a migrated table and on one with only the contract's indexes.
func bothTables(t *testing.T, f func(t *testing.T, s *Store, db *sql.DB)) {
	runcheck.BothTables(t, orderedStore, contractStore, f)
}

// TestRunsClaim checks what ends a run: nothing, when nothing blocks; a row
// leased by another claim, waiting out a backoff, or dead under
// BlockOnDead; and the limit, which cuts runs by id. (SQLite has one writer:
// no claim runs while another holds rows locked.)
func TestRunsClaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		blockOnDead bool
		limit       int
		// block does something to a#0, leased, before the claim.
		block func(t *testing.T, s *Store, a0 *outbox.Message)
		want  []string
	}{
		{name: "NothingBlocks", limit: 10, want: []string{"a#0", "b#0", "a#1", "b#1", "a#2", "c#0"}},
		{name: "LimitCutsByID", limit: 4, want: []string{"a#0", "b#0", "a#1", "b#1"}},
		{name: "Acknowledged", limit: 10, want: []string{"b#0", "a#1", "b#1", "a#2", "c#0"},
			block: func(t *testing.T, s *Store, a0 *outbox.Message) {
				_, err := s.Ack(t.Context(), outbox.AckParams{Messages: []*outbox.Message{a0}})
				require.NoError(t, err)
			}},
		{name: "Leased", limit: 10, want: []string{"b#0", "b#1", "c#0"},
			block: func(*testing.T, *Store, *outbox.Message) {}},
		{name: "Backoff", limit: 10, want: []string{"b#0", "b#1", "c#0"},
			block: func(t *testing.T, s *Store, a0 *outbox.Message) {
				require.NoError(t, s.Reschedule(t.Context(), outbox.RescheduleParams{
					Retries: []outbox.Retry{{Message: a0, At: time.Now().Add(time.Hour)}}}))
			}},
		{name: "DueAgain", limit: 10, want: []string{"a#0", "b#0", "a#1", "b#1", "a#2", "c#0"},
			block: func(t *testing.T, s *Store, a0 *outbox.Message) {
				require.NoError(t, s.Reschedule(t.Context(), outbox.RescheduleParams{
					Retries: []outbox.Retry{{Message: a0, At: time.Now().Add(-time.Minute)}}}))
			}},
		{name: "DeadBlocks", blockOnDead: true, limit: 10, want: []string{"b#0", "b#1", "c#0"},
			block: func(t *testing.T, s *Store, a0 *outbox.Message) {
				require.NoError(t, s.Kill(t.Context(), outbox.KillParams{Dead: []outbox.Dead{{Message: a0, Reason: "poison"}}}))
			}},
		{name: "DeadSkipped", limit: 10, want: []string{"b#0", "a#1", "b#1", "a#2", "c#0"},
			block: func(t *testing.T, s *Store, a0 *outbox.Message) {
				require.NoError(t, s.Kill(t.Context(), outbox.KillParams{Dead: []outbox.Dead{{Message: a0, Reason: "poison"}}}))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bothTables(t, func(t *testing.T, s *Store, db *sql.DB) {
				writeRows(t, s, db, "a#0", "b#0", "a#1", "b#1", "a#2", "c#0")
				if tc.block != nil {
					got, a := orderedClaim(t, s, 1, tc.blockOnDead)
					require.Equal(t, []string{"a#0"}, got)
					tc.block(t, s, a[0])
				}
				got, _ := orderedClaim(t, s, tc.limit, tc.blockOnDead)
				require.Equal(t, tc.want, got)
			})
		})
	}
}

// writeRows commits one message per "agg#n", in one transaction, in order.
func writeRows(t *testing.T, s *Store, db *sql.DB, rows ...string) {
	t.Helper()
	var msgs []*outbox.Message
	for _, r := range rows {
		agg, n, _ := strings.Cut(r, "#")
		msgs = append(msgs, &outbox.Message{AggregateType: "order", AggregateID: agg, EventType: "E", Payload: []byte(n)})
	}
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter[*sql.Tx](s).Write(t.Context(), tx, msgs...))
	require.NoError(t, tx.Commit())
}

// TestRunsClaimConcurrent runs ordered claimers side by side while writers
// commit (runcheck.Violations): no message may be claimed before its
// predecessor was confirmed.
func TestRunsClaimConcurrent(t *testing.T) {
	t.Parallel()
	bothTables(t, func(t *testing.T, s *Store, db *sql.DB) {
		write := runcheck.SQLWrite(db, outbox.NewWriter[*sql.Tx](s))
		// The writers' own transactions meet the claims at SQLite's lock,
		// under busy_timeout; on a loaded machine they may wait it out.
		retry := func(ctx context.Context, msgs []*outbox.Message) error {
			for {
				if err := write(ctx, msgs); err == nil || !isBusy(err) || ctx.Err() != nil {
					return err
				}
			}
		}
		require.Zero(t, runcheck.Violations(t, s, retry), "messages claimed before their predecessor was confirmed")
	})
}
