package sqlitestore

import (
	"maps"

	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// WithColumns makes the Store poll a table whose columns have other names:
// cols maps each contract column (docs/table-contract.md: id, message_id,
// aggregate_type, aggregate_id, event_type, payload, status, retry_count,
// next_retry_at, created_at, updated_at, and the optional ones) to the
// table's column that holds it. Polling settles rows in the table, so the
// mapping must name every state column (id, status, retry_count,
// next_retry_at, created_at, updated_at); a log-only mapping, which names
// none, is refused by [New]. An optional column the mapping does not name
// is treated as absent, whatever the table has. [Store.CheckTable] and the
// first statement report mapped columns the table lacks, with the mapping
// and the table's columns.
//
// A mapped table is the team's own: [Store.Migrate] refuses it.
// [Store.Archive] moves every column of the table, mapped or not. Default:
// none (the contract's names).
func WithColumns(cols map[string]string) Option {
	return func(c *config) { c.columns = colmap.Map(maps.Clone(cols)) }
}

// sql returns stmt, written with the contract's column names, as it runs on
// the table: rewritten for WithColumns, as it is without.
func (s *Store) sql(stmt string) string { return s.core.Map.SQL(stmt) }

// column returns the table's name of contract column c.
func (s *Store) column(c string) string { return sqlcore.Column(s.mapping, c) }
