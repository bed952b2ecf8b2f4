package storetest

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// MappedStore is a store that can read its table through a mapping of the
// contract's columns to the table's own (a WithColumns option).
type MappedStore interface {
	CheckedStore
	Migrate(ctx context.Context) error
}

// ColumnsHarness is how a store with a column mapping plugs into
// [RunColumnMappings].
type ColumnsHarness struct {
	// Renamed maps every contract column to another name; the status
	// column to ob_status and retry_count to ob_retry_count.
	Renamed map[string]string
	// New returns, on a database or schema of t's own, a function that
	// calls the store's constructor with the mapping cols, and no table.
	New func(t *testing.T) func(cols map[string]string) (MappedStore, error)
	// Mapped makes, on a database or schema of t's own, the table a migrated
	// store makes, with its columns renamed as Renamed says, and returns the
	// constructor's store on it with the mapping cols.
	Mapped func(t *testing.T, cols map[string]string) (MappedStore, error)
}

// RunColumnMappings checks, in parallel subtests, the mappings the store's
// constructor refuses, each named in the error, that Migrate leaves a mapped
// table alone, and that a mapping naming a column the table lacks fails
// CheckTable and the first claim, with the mapping and the table's columns
// in the message.
func RunColumnMappings(t *testing.T, h ColumnsHarness) {
	t.Helper()
	t.Run("NewRefuses", func(t *testing.T) {
		t.Parallel()
		newStore := h.New(t)
		logOnly := map[string]string{"message_id": "id", "aggregate_type": "aggregatetype", "aggregate_id": "aggregateid",
			"event_type": "type", "payload": "payload"}
		for _, tc := range []struct {
			name string
			cols map[string]string
			want string
		}{
			{"LogOnly", logOnly, "log-only mapping"},
			{"UnknownColumn", map[string]string{"colour": "c"}, `"colour" is not a column`},
			{"StateInPart", map[string]string{"message_id": "a", "aggregate_type": "b", "aggregate_id": "c",
				"event_type": "d", "payload": "e", "status": "f"}, "state columns mapped in part"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := newStore(tc.cols)
				require.ErrorContains(t, err, tc.want)
			})
		}
		s, err := newStore(h.Renamed)
		require.NoError(t, err, "a mapping of every column")
		require.ErrorContains(t, s.Migrate(t.Context()), "WithColumns", "Migrate leaves a mapped table alone")
	})
	t.Run("MappedColumnMissing", func(t *testing.T) {
		t.Parallel()
		cols := maps.Clone(h.Renamed)
		cols["status"] = "ob_state" // misspelt: the table has ob_status
		s, err := h.Mapped(t, cols)
		require.NoError(t, err)
		for name, err := range map[string]error{
			"CheckTable": s.CheckTable(t.Context()),
			"Claim": func() error {
				_, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: 1, Lease: time.Minute})
				return err
			}(),
		} {
			require.ErrorContains(t, err, "status -> ob_state", name)
			require.ErrorContains(t, err, "status: ob_state", name+": the mapping")
			require.ErrorContains(t, err, "ob_retry_count, ob_status", name+": the table's columns")
		}
	})
}
