// Package natsin consumes NATS JetStream messages through an inbox: each
// message's handler runs in the inbox transaction, and the message is
// acknowledged only after that transaction committed.
//
// The caller creates the stream and a durable pull consumer with explicit
// acks (jetstream.AckExplicitPolicy) and passes it to [New]:
//
//	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
//		Durable: "shipping", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
//	})
//	c, err := natsin.New(cons, in, handle, natsin.WithConcurrency(8), natsin.WithOrderedKeys(true),
//		natsin.WithDeadLetter(js, "dead.shipping"))
//	err = c.Run(ctx)
//
// # Messages
//
// The handler gets an *outbox.Message rebuilt from the headers that
// publisher/natspub sets: MessageID (outbox-message-id, else Nats-Msg-Id),
// AggregateType, AggregateID, EventType, all headers in Headers, the subject
// in Topic, the data in Payload and the stream timestamp in CreatedAt.
// The Content-Type header (natspub sets it) goes to ContentType.
//
// # Failures
//
// A failing handler is retried in place with backoff, and JetStream is told
// the message is in progress meanwhile. The attempt count includes earlier
// deliveries (NumDelivered), so a message that crashes the consumer still
// reaches WithMaxAttempts; then it goes to the dead-letter subject
// (WithDeadLetter). Without one it is retried until it succeeds: it is
// never dropped. An outage of the inbox's database does not count as an
// attempt. Acknowledgements that fail leave the message to be delivered
// again, and the inbox absorbs the copy.
//
// Give the JetStream consumer an AckWait longer than the slowest run of the
// handler: a message still being handled when AckWait passes is delivered
// again, and that copy waits for the first one's transaction and is skipped.
//
// A network partition or a server that loses the pull request does not
// stop [Consumer.Run]: when the server's heartbeats stop for half the pull
// expiry ([WithPullExpiry]), the consumer logs a warning and pulls again.
package natsin
