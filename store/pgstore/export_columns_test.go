package pgstore

import (
	"maps"

	"github.com/outboxkit/outbox/internal/colmap"
)

// MapSQL returns stmt, written with the contract's column names, as a Store
// with WithColumns(cols) runs it, for tests whose own SQL reads the mapped
// table.
func MapSQL(cols map[string]string, stmt string) string {
	return colmap.NewRewriter(colmap.Map(cols), colmap.PostgreSQL).SQL(stmt)
}

// RenamedColumns returns a mapping of every contract column to another name
// (the one statements_mapped.golden is written with).
func RenamedColumns() map[string]string { return maps.Clone(goldenMapping) }
