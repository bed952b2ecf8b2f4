package demo

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOpenSQLite(t *testing.T) {
	t.Parallel()
	r := &runner{cfg: Config{}.withDefaults(), dir: t.TempDir()}
	defer r.close()
	db, err := r.openSQLite("x.db")
	require.NoError(t, err)
	for _, tc := range []struct{ pragma, want string }{
		{"journal_mode", "wal"},
		{"synchronous", "1"}, // NORMAL
		{"busy_timeout", "5000"},
	} {
		var got string
		require.NoError(t, db.QueryRow("PRAGMA "+tc.pragma).Scan(&got))
		require.Equal(t, tc.want, got, tc.pragma)
	}
}
