package sqlitestore

import "github.com/outboxkit/outbox/internal/colmap"

// WithChunkRows lets tests cross statement boundaries with small batches.
var WithChunkRows = withChunkRows

// MapSQL returns stmt, written with the contract's column names, as a Store
// with WithColumns(cols) runs it, for tests whose own SQL reads the mapped
// table.
func MapSQL(cols map[string]string, stmt string) string {
	return colmap.NewRewriter(colmap.Map(cols), colmap.SQLite).SQL(stmt)
}
// RenamedColumns returns a mapping of every contract column to another name:
// Debezium's names for the message's columns, ob_ before the others'.
func RenamedColumns() map[string]string {
	return map[string]string{
		"id": "ob_id", "message_id": "ob_message_id", "aggregate_type": "aggregatetype", "aggregate_id": "aggregateid",
		"event_type": "type", "payload": "payload", "status": "ob_status", "retry_count": "ob_retry_count",
		"next_retry_at": "ob_next_retry_at", "created_at": "ob_created_at", "updated_at": "ob_updated_at",
		"headers": "ob_headers", "topic": "ob_topic", "partition_key": "ob_partition_key", "last_error": "ob_last_error",
		"content_type": "ob_content_type", "payload_bytes": "ob_payload_bytes", "deliver_at": "ob_deliver_at",
		"expires_at": "ob_expires_at",
	}
}
