package sqlitestore

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox"
)

var _ outbox.IndexChecker = (*Store)(nil)

// MissingIndexes returns, for each index that Migrate creates for claims
// and the table lacks, what claims do without it and the statement that
// creates it (the definition of migrations 0002 and 0003). The relay works
// without them; claims then read the contract's (status, next_retry_at)
// index (claimSQL). It only reads the catalog; part of
// [outbox.IndexChecker]. Safe for concurrent use.
func (s *Store) MissingIndexes(ctx context.Context) ([]outbox.TableProblem, error) {
	var out []outbox.TableProblem
	for _, ix := range []struct {
		name, suffix, def, without string
	}{
		{s.table.pendingIndex(), "pending", "(id, next_retry_at) WHERE status = 0",
			"claims read the (status, next_retry_at) index: rows never claimed in id order, and every other pending row, sorted"},
		{s.table.headIndex(), "head", "(aggregate_type, aggregate_id, id, status) WHERE status IN (0, 2)",
			"ordered claims read the aggregates' earlier rows from the (status, next_retry_at) index, and when their runs " +
				"come back short, the first pending row of every aggregate: a pass over the whole backlog"},
	} {
		ok, err := hasIndex(ctx, s.db, s.table, ix.name)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: %w", err)
		}
		if ok {
			continue
		}
		out = append(out, outbox.TableProblem{
			Problem: fmt.Sprintf("index %s is missing: %s", ix.name, ix.without),
			Fix:     s.sql(fmt.Sprintf("CREATE INDEX %s ON %s %s", s.table.index(ix.suffix), quoteIdent(s.table.name), ix.def)),
		})
	}
	return out, nil
}
