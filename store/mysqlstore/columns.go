package mysqlstore

import (
	"maps"

	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// WithColumns makes the Store poll a MySQL or MariaDB table whose columns have
// other names: cols maps each contract column to the table's column that
// holds it, by the rules of docs/table-contract.md ("Your own layout"). It
// must name the required columns and, since polling settles rows, every
// state column (id, status, retry_count, next_retry_at, created_at,
// updated_at), or [New] refuses it; an optional column left out counts as
// absent.
// [Store.CheckTable] reads information_schema to report mapped columns the
// table lacks, with the mapping and the table's columns, as the first
// statement does.
//
// [Store.Migrate] refuses a mapped table (it is the team's own), and
// [Store.Archive] moves all of its columns. Default: the contract's names.
func WithColumns(cols map[string]string) Option {
	return func(c *config) { c.columns = colmap.Map(maps.Clone(cols)) }
}

// sql returns stmt, written with the contract's column names, as it runs on
// the table: rewritten for WithColumns, as it is without.
func (s *Store) sql(stmt string) string { return s.core.Map.SQL(stmt) }

// column returns the table's name of contract column c.
func (s *Store) column(c string) string { return sqlcore.Column(s.mapping, c) }
