package sqlitestore

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testsvc"
)

func TestPreparedStatements(t *testing.T) {
	db, err := Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	defer db.Close()
	var p prepared
	first := p.stmt(t.Context(), db, "SELECT 1")
	require.NotNil(t, first)
	require.Same(t, first, p.stmt(t.Context(), db, "SELECT 1"), "prepared once")
	require.Nil(t, p.stmt(t.Context(), db, "SELECT FROM nothing"), "a statement that does not prepare runs as it is")
	for i := 2; i <= maxPrepared; i++ {
		require.NotNil(t, p.stmt(t.Context(), db, fmt.Sprintf("SELECT %d", i)))
	}
	require.Nil(t, p.stmt(t.Context(), db, "SELECT 'one too many'"), "the cache is bounded")
	require.Same(t, first, p.stmt(t.Context(), db, "SELECT 1"), "and keeps what it has")
}
