package outbox

// Log attribute keys, one place for every snake_case key the relay logs.
const (
	attrRowID       = "row_id"
	attrMessageID   = "message_id"
	attrAggregateID = "aggregate_id"
	attrEventType   = "event_type"
	attrAttempt     = "attempt"
	attrBatchSize   = "batch_size"
	attrError       = "error"
	attrDelay       = "delay"
	attrRelay       = "relay"
	attrCount       = "count"
)
