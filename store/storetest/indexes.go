package storetest

import (
	"strings"
	"testing"

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
