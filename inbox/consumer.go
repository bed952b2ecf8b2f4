package inbox

import (
	"time"

	"github.com/outboxkit/outbox"
)

// Defaults of the consumers in the subpackages (natsin, kafkain, amqpin,
// redisin), which share these options.
const (
	// DefaultConcurrency is how many messages a consumer processes at once.
	DefaultConcurrency = 1
	// DefaultMaxAttempts is how many times a consumer runs a failing handler
	// on a message (counting earlier deliveries the broker reports) before
	// it moves the message to the dead-letter destination.
	DefaultMaxAttempts = 5
	// DefaultRetryBase and DefaultRetryCap bound the delay between two runs
	// of a failing handler: base × 2^(attempt-1), at most cap, ±20% jitter.
	DefaultRetryBase = 100 * time.Millisecond
	DefaultRetryCap  = 10 * time.Second
)

// Headers a consumer adds to a message it moves to a dead-letter
// destination (where the broker has headers; Redis Streams get fields of the
// same names). The message keeps its own headers, id included, so it can be
// replayed: a dead-lettered message was never recorded in the inbox, and a
// replay is processed.
const (
	HeaderDeadReason   = "outbox-dead-reason"   // the last handler error
	HeaderDeadAttempts = "outbox-dead-attempts" // how many times the handler ran
	HeaderDeadConsumer = "outbox-dead-consumer" // the inbox's consumer name
)

// DeliveryEvent describes what a consumer did with one delivery, for [HookDelivery].
type DeliveryEvent struct {
	Message *outbox.Message
	// Outcome is Processed or Duplicate; 0 when the message was dead-lettered
	// or abandoned (the consumer stopped before it was processed).
	Outcome Outcome
	// DeadLettered is true when the message went to the dead-letter destination.
	DeadLettered bool
	// Attempts is how many times the handler ran on the message, counting the
	// earlier deliveries the broker reports.
	Attempts int
	// Err is the last handler error of a dead-lettered message.
	Err error
}

// HookDelivery observes a consumer. OnDelivery is called once for every
// delivery the consumer finished (acknowledged or dead-lettered), from the
// worker goroutine, so it must be fast.
type HookDelivery interface {
	OnDelivery(DeliveryEvent)
}
