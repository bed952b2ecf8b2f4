// Package amqpin consumes RabbitMQ messages through an inbox: each message's
// handler runs in the inbox transaction, and the message is acknowledged
// only after that transaction committed.
//
//	conn, err := amqp.Dial("amqp://guest:guest@localhost:5672/")
//	c, err := amqpin.New(conn, "shipping", in, handle, amqpin.WithConcurrency(8),
//		amqpin.WithDeadLetter("", "shipping.dead"))
//	err = c.Run(ctx)
//
// The consumer opens its own channels on the caller's connection (one to
// consume, one in confirm mode for dead letters) and closes them when Run
// returns; it never closes the connection. When RabbitMQ closes the channel
// or the connection, Run returns [ErrDeliveriesClosed] and the messages it
// had not acknowledged are delivered again: run it again on a new
// connection.
//
// # Messages
//
// The handler gets an *outbox.Message rebuilt from what publisher/amqppub
// sends: MessageID from the message-id property (else the
// outbox-message-id header), AggregateType, AggregateID and EventType from
// the outbox headers, all headers in Headers (non-string values formatted
// as text), the routing key in Topic, the body in Payload and the timestamp
// property in CreatedAt.
// The content-type property goes to ContentType.
//
// # Failures
//
// A failing handler is retried in place with backoff. Quorum queues count
// deliveries (x-delivery-count), so with them a message that crashes the
// consumer still reaches WithMaxAttempts; then it is published to the
// dead-letter exchange and routing key (WithDeadLetter) or rejected to the
// queue's own dead-letter exchange (WithDeadLetterReject). Without either it
// is retried until it succeeds: it is never dropped. An outage of the
// inbox's database does not count as an attempt. When the consumer stops,
// a message whose transaction did not commit is requeued.
package amqpin
