package pgstore

import (
	"fmt"
	"maps"

	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// WithColumns makes the Store poll a table whose columns have other names:
// cols maps each contract column (docs/table-contract.md: id, message_id,
// aggregate_type, aggregate_id, event_type, payload, status, retry_count,
// next_retry_at, created_at, updated_at, and the optional ones) to the
// table's column that holds it, as store/pgcdc's WithColumns does. Polling
// settles rows in the table, so the mapping must name every state column
// (id, status, retry_count, next_retry_at, created_at, updated_at); a
// log-only mapping, which names none, is refused by [New] (read such a
// table with store/pgcdc). An optional column the mapping does not name is
// treated as absent, whatever the table has. [Store.CheckTable] and the
// first statement report mapped columns the table lacks, with the mapping
// and the table's columns.
//
// A mapped table is the team's own: [Store.Migrate] refuses it, and
// [WithBatchLease] and [WithNotifyTrigger] are refused with it (not
// available yet). [Store.Archive] moves every column of the
// table, mapped or not. The claims know their indexes by the names Migrate
// gives them, which [Store.MissingIndexes] advises with the table's
// columns. Default: none (the contract's names).
func WithColumns(cols map[string]string) Option {
	return func(c *config) { c.columns = colmap.Map(maps.Clone(cols)) }
}

// checkColumns returns the problems of WithColumns and of the options a
// mapped table refuses.
func (c *config) checkColumns() []error {
	if len(c.columns) == 0 {
		return nil
	}
	errs := sqlcore.CheckColumns(c.columns, "read the table with store/pgcdc")
	for _, o := range []struct {
		on   bool
		name string
	}{{c.batchLease, "WithBatchLease"}, {c.notifyTrigger, "WithNotifyTrigger"}} {
		if o.on {
			errs = append(errs, fmt.Errorf("%s: not available with WithColumns yet", o.name))
		}
	}
	return errs
}

// contractColumns turns the table's columns (name -> type) into the
// contract's names for the mapped table: the columns the mapping names,
// under their contract names. It fails, with the mapping and the table's
// columns, when the table lacks a mapped column.
func (s *Store) contractColumns(cols map[string]string) (map[string]string, error) {
	if len(s.cfg.columns) == 0 {
		return cols, nil
	}
	names := make([]string, 0, len(cols))
	for n := range cols {
		names = append(names, n)
	}
	if err := s.cfg.columns.Check(s.cfg.table, names); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	out := make(map[string]string, len(s.cfg.columns))
	for k, v := range s.cfg.columns {
		out[k] = cols[v]
	}
	return out, nil
}
