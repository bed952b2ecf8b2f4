package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// CheckMissingIndexes checks [outbox.IndexChecker] on a table with only the
// contract's indexes (contract): it names want indexes, each with a
// CREATE INDEX statement that, run through exec, leaves none missing; and
// on a migrated table (migrated) none is missing.
func CheckMissingIndexes(t *testing.T, contract, migrated outbox.IndexChecker, exec func(sql string), want int) {
	t.Helper()
	missing, err := contract.MissingIndexes(t.Context())
	require.NoError(t, err)
	require.Len(t, missing, want)
	for _, m := range missing {
		require.NotEmpty(t, m.Problem)
		require.True(t, strings.HasPrefix(m.Fix, "CREATE INDEX "), m.Fix)
		exec(m.Fix)
	}
	missing, err = contract.MissingIndexes(t.Context())
	require.NoError(t, err)
	require.Empty(t, missing, "after the suggested statements")

	missing, err = migrated.MissingIndexes(t.Context())
	require.NoError(t, err)
	require.Empty(t, missing, "a migrated table")
}

// ClaimAll claims from s, limit rows at a time with an hour's lease, until a
// claim comes back empty, and returns the row ids it claimed. It fails t if
// a row is claimed twice or a claim's rows are not in id order.
func ClaimAll(t *testing.T, s outbox.Store, limit int) map[int64]bool {
	t.Helper()
	seen := map[int64]bool{}
	for {
		c, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: limit, Lease: time.Hour})
		require.NoError(t, err)
		if len(c.Messages) == 0 {
			return seen
		}
		for i, m := range c.Messages {
			require.False(t, seen[m.RowID], "row %d claimed twice", m.RowID)
			seen[m.RowID] = true
			if i > 0 {
				require.Less(t, c.Messages[i-1].RowID, m.RowID, "a claim's rows are in id order")
			}
		}
	}
}
