package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// CheckedStore is a store whose table can be checked.
type CheckedStore interface {
	outbox.Store
	outbox.TableChecker
}

// TableCase is one case of [RunTableChecks]: a table and what
// CheckTable says of it.
type TableCase struct {
	Name  string
	Table string // the table the store is given
	DDL   string // creates the table (or whatever the case needs); "" creates nothing
	// Want are the parts of the error; none means the table is fine, and
	// then a row inserted by the harness must go through the relay's calls
	// with its values intact.
	Want []string
}

// TableHarness is how a store plugs into [RunTableChecks].
type TableHarness struct {
	// New returns, on a fresh database or schema of t's own, a function
	// that runs a statement and one that returns a store on a table.
	// The cases that pass the check must name their table t.
	New func(t *testing.T) (exec func(sql string), store func(table string) CheckedStore)
}

// insertOne inserts the row RunTableChecks sends through a table that passes.
const insertOne = `INSERT INTO t (message_id, aggregate_type, aggregate_id, event_type, payload)
VALUES ('0190a0a0-0000-7000-8000-000000000001', 'order', '42', 'CREATED', '{"a":1}')`

// RunTableChecks runs each case in parallel: it runs the case's DDL and
// checks the table. When the check passes, it proves that the relay reads
// the table: a row goes through a claim, a lease that holds, a retry, a
// second claim, an ack and the stats, its values intact.
func RunTableChecks(t *testing.T, h TableHarness, cases []TableCase) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			exec, store := h.New(t)
			if tc.DDL != "" {
				exec(tc.DDL)
			}
			s := store(tc.Table)
			ctx := t.Context()
			err := s.CheckTable(ctx)
			if len(tc.Want) > 0 {
				var te *outbox.TableError
				require.True(t, errors.As(err, &te), "got %v", err)
				for _, w := range tc.Want {
					require.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			exec(insertOne)
			m := claimOne(ctx, t, s)
			require.Equal(t, "0190a0a0-0000-7000-8000-000000000001", m.MessageID)
			require.Equal(t, "42", m.AggregateID)
			require.Equal(t, "CREATED", m.EventType)
			require.JSONEq(t, `{"a":1}`, string(m.Payload))
			require.Equal(t, 1, m.Attempt)
			again, err := s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Minute})
			require.NoError(t, err)
			require.Empty(t, again.Messages, "the lease holds")
			require.NoError(t, s.Reschedule(ctx, outbox.RescheduleParams{
				Retries: []outbox.Retry{{Message: m, At: time.Now().Add(-time.Second), Err: "again"}}}))
			m = claimOne(ctx, t, s)
			require.Equal(t, 2, m.Attempt)
			n, err := s.Ack(ctx, outbox.AckParams{Messages: []*outbox.Message{m}})
			require.NoError(t, err)
			require.Equal(t, 1, n)
			st, err := s.Stats(ctx)
			require.NoError(t, err)
			require.Zero(t, st.Pending)
		})
	}
}

// claimOne claims and returns the one due row.
func claimOne(ctx context.Context, t *testing.T, s outbox.Store) *outbox.Message {
	t.Helper()
	c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, c.Malformed)
	require.Len(t, c.Messages, 1)
	return c.Messages[0]
}
