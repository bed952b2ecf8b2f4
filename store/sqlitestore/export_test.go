package sqlitestore

import (
	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// WithChunkRows lets tests cross statement boundaries with small batches.
var WithChunkRows = withChunkRows

// MapSQL returns stmt, written with the contract's column names, as a Store
// with WithColumns(cols) runs it, for tests whose own SQL reads the mapped
// table.
func MapSQL(cols map[string]string, stmt string) string {
	return colmap.NewRewriter(colmap.Map(cols), colmap.SQLite).SQL(stmt)
}

// RenamedColumns is testsvc.RenamedColumns.
var RenamedColumns = testsvc.RenamedColumns
