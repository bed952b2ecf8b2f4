package mysqlstore

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox"
)

var _ outbox.IndexChecker = (*Store)(nil)

// MissingIndexes returns, for each index that Migrate creates for claims
// and the table lacks, what claims do without it and the statement that
// creates it (InnoDB builds it without blocking writers). The relay works
// without them; claims then read the contract's indexes instead
// (claimSQLs). It only reads the catalog; part of [outbox.IndexChecker].
// Safe for concurrent use.
func (s *Store) MissingIndexes(ctx context.Context) ([]outbox.TableProblem, error) {
	lead, err := s.leadingColumns(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: %w", err)
	}
	var out []outbox.TableProblem
	for _, ix := range []struct {
		found               string
		lead, name, columns string
		without             string
	}{
		{claimIndex(lead), "(status, id)", "idx_status_id", "(status, id)",
			"claims read the (status, next_retry_at) index: rows due again first, then rows never claimed, in id order"},
		{headIndex(lead), "(status, aggregate_type, aggregate_id)", "idx_status_aggregate", "(status, aggregate_type, aggregate_id, id)",
			"ordered claims read each aggregate's earlier rows, and when their runs come back short (often with several " +
				"ordered relays) the first rows of the backlog's aggregates, in ranges of the (status, next_retry_at) index, " +
				"never the table's sent rows, but as many rows of the backlog as lie before what they take"},
	} {
		if ix.found != "" {
			continue
		}
		out = append(out, outbox.TableProblem{
			Problem: fmt.Sprintf("no index leading with %s: %s", ix.lead, ix.without),
			Fix:     s.sql(fmt.Sprintf("CREATE INDEX %s ON %s %s", quoteIdent(ix.name), s.table.quoted(), ix.columns)),
		})
	}
	return out, nil
}
