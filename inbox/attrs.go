package inbox

// Log attribute keys of the inbox and its consumers, in one place.
const (
	attrConsumer  = "consumer"
	attrMessageID = "message_id"
	attrError     = "error"
	attrDelay     = "delay"
)
