// Package claimindex knows the indexes `outbox migrate` adds for claims, so
// that a harness can leave a migrated table with only the table contract's
// two indexes, as a team's own table has them (`outbox bench
// --contract-indexes`, the chaos suite's -contract columns).
package claimindex

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox"
)

// Drop drops the claim indexes of table, on a database of kind
// ("postgres", "mysql" or "sqlite"), running each statement with exec,
// and then checks that ic, the table's store, lists exactly that many
// missing indexes: a store that learnt other index names fails the caller
// instead of leaving a table that is not what it says.
func Drop(ctx context.Context, kind, table string, exec func(ctx context.Context, query string) error, ic outbox.IndexChecker) error {
	var drops []string
	switch kind {
	case "postgres":
		drops = []string{"DROP INDEX " + table + "_pending_idx", "DROP INDEX " + table + "_head_idx"}
	case "mysql":
		drops = []string{"DROP INDEX idx_status_id ON " + table, "DROP INDEX idx_status_aggregate ON " + table}
	case "sqlite":
		drops = []string{"DROP INDEX " + table + "_pending", "DROP INDEX " + table + "_head"}
	default:
		return fmt.Errorf("leave only the contract's indexes: unknown database %q", kind)
	}
	for _, q := range drops {
		if err := exec(ctx, q); err != nil {
			return fmt.Errorf("leave only the contract's indexes: %s: %w", q, err)
		}
	}
	missing, err := ic.MissingIndexes(ctx)
	if err != nil {
		return fmt.Errorf("leave only the contract's indexes: %w", err)
	}
	if len(missing) != len(drops) {
		return fmt.Errorf("leave only the contract's indexes: the store misses %d indexes after %d were dropped: %v",
			len(missing), len(drops), missing)
	}
	return nil
}
