package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// Claims on a table that lacks the pending index.
//
// Migrate's pending index, (id) WHERE status = 0, lets a claim walk the
// pending rows in id order and nothing else. A table with only the
// contract's indexes has no index in id order that leaves the sent rows
// out: walking the primary key steps over every sent row kept (half a
// million of them cost a claim about 100 ms), and sorting the pending rows
// by id reads the whole backlog. So on such a table a claim reads the
// contract's (status, next_retry_at) index, as two ranges: the rows due
// again (a retry, or a lease that ran out), oldest first, then the rows
// never claimed (next_retry_at NULL), in the index's order, which for
// equal keys is the rows' place in the heap: roughly, but not strictly,
// write order. A claim then costs what its batch costs, whatever the
// table keeps. Rows leased by other claims have a next_retry_at in the
// future, which lies between the two ranges, so a claim does not step
// over them either.

var _ outbox.IndexChecker = (*Store)(nil)

// pendingIndexSuffix names Migrate's index of pending rows in id order.
const pendingIndexSuffix = "_pending_idx"

// tableIndexes is what a Store knows of the indexes its claims use.
type tableIndexes struct {
	pending bool // Migrate's pending index: claims walk pending rows in id order
	head    bool // Migrate's head index: ordered claims step from aggregate to aggregate (ordered.go)
}

// indexNamesSQL lists the names of the indexes of table $1.
const indexNamesSQL = `SELECT COALESCE(array_agg(c.relname::text), '{}') FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
	WHERE i.indrelid = to_regclass($1)`

// indexNames returns the names of the table's indexes.
func (s *Store) indexNames(ctx context.Context) (map[string]bool, error) {
	var names []string
	if err := s.pool.QueryRow(ctx, indexNamesSQL, s.ident).Scan(&names); err != nil {
		return nil, fmt.Errorf("pgstore: read the indexes of %s: %w", s.cfg.table, err)
	}
	has := map[string]bool{}
	for _, n := range names {
		has[n] = true
	}
	return has, nil
}

// indexName is the name Migrate gives the table's index with suffix.
func (s *Store) indexName(suffix string) string {
	parts, _ := splitTable(s.cfg.table) // validated by New
	return sqlcore.SideName(parts[len(parts)-1], suffix, 63)
}

// indexesFor returns which of Migrate's claim indexes the table has, by
// name, finding out on first use.
func (s *Store) indexesFor(ctx context.Context) (tableIndexes, error) {
	s.mu.Lock()
	ix := s.indexes
	s.mu.Unlock()
	if ix != nil {
		return *ix, nil
	}
	has, err := s.indexNames(ctx)
	if err != nil {
		return tableIndexes{}, err
	}
	ix = &tableIndexes{pending: has[s.indexName(pendingIndexSuffix)], head: has[s.indexName(headIndexSuffix)]}
	s.mu.Lock()
	s.indexes = ix
	s.mu.Unlock()
	return *ix, nil
}

// MissingIndexes returns, for each index that Migrate creates for claims
// and the table lacks, what claims do without it and the statement that
// creates it (CONCURRENTLY, so that it does not block writers; run it
// outside a transaction). The relay works without them; claims then read
// the contract's indexes instead. The claims know the indexes by the names
// Migrate gives them; with [WithColumns] the statements name the table's
// columns. It only reads the catalog; part of [outbox.IndexChecker]. Safe
// for concurrent use.
func (s *Store) MissingIndexes(ctx context.Context) ([]outbox.TableProblem, error) {
	has, err := s.indexNames(ctx)
	if err != nil {
		return nil, err
	}
	var out []outbox.TableProblem
	for _, ix := range []struct{ suffix, def, without string }{
		{pendingIndexSuffix, "(id) WHERE status = 0",
			"claims read the (status, next_retry_at) index and take never-claimed rows in its order, roughly but not strictly oldest first"},
		{headIndexSuffix, `(aggregate_type COLLATE "C", aggregate_id COLLATE "C", id) WHERE status IN (0, 2)`,
			"ordered claims read a window of due rows and find each aggregate's earlier rows through the (aggregate_type, aggregate_id) index, " +
				"which costs as many rows as the table keeps of that aggregate"},
	} {
		name := s.indexName(ix.suffix)
		if has[name] {
			continue
		}
		out = append(out, outbox.TableProblem{
			Problem: fmt.Sprintf("index %s is missing: %s", name, ix.without),
			Fix:     s.m.SQL(fmt.Sprintf("CREATE INDEX CONCURRENTLY %s ON %s %s", pgx.Identifier{name}.Sanitize(), s.ident, ix.def)),
		})
	}
	return out, nil
}
