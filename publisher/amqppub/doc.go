// Package amqppub publishes outbox messages to RabbitMQ (AMQP 0-9-1) with
// amqp091-go, using publisher confirms and the mandatory flag, the two
// settings without which a broker "ack" promises nothing.
//
// # Connection
//
// amqp091-go does not reconnect by itself, so a [Publisher] owns its
// connection: [New] takes a [DialFunc] ([DialURL] makes one from an amqp://
// or amqps:// URL, [Dial] does both) and runs a background loop that dials,
// watches the connection, and dials again when it is lost (a broker restart,
// a network cut, a missed heartbeat), backing off between failed attempts.
// While it is disconnected, Publish fails at once with [outbox.Unavailable]
// (after waiting for one attempt that is under way or that it asks for), so
// the relay pauses and probes with Ping instead of spending attempts. Close
// the Publisher when done; it closes its connection.
//
// Each Publish takes one of at most [WithMaxChannels] confirm-mode channels
// of the current connection; channels are reused while healthy and replaced
// after any failure, so a late confirmation or return of an abandoned batch
// never lands in a later one.
//
// # Messages
//
// Each message is published to the configured exchange ([WithExchange];
// default "", which routes to the queue named by the routing key) with
// routing key = prefix + [outbox.Message.Destination] (its Topic, else its
// EventType), and:
//
//   - delivery mode persistent, content type [outbox.Message.MediaType]
//     (application/json unless the message sets ContentType);
//   - MessageId = the message id (consumers deduplicate on it), Type = the
//     event type, Timestamp = CreatedAt when set;
//   - headers table = [outbox.Message.StandardHeaders] (outbox-message-id,
//     outbox-aggregate-type, outbox-aggregate-id, outbox-event-type,
//     traceparent, tracestate and the caller's own), as strings.
//
// # Results
//
// A nil result means the broker confirmed the message (basic.ack); for a
// persistent message on durable queues that happens once it is written to
// disk. Confirmations are matched to messages by delivery tag, whatever
// order and grouping the broker sends them in.
//
//   - basic.return (unroutable with mandatory on: no queue bound to the
//     routing key, 312 NO_ROUTE): [outbox.Unroutable], so the relay retries
//     it with backoff and a queue bound in the meantime receives it; with
//     [WithUnroutablePermanent] also [outbox.Permanent] (dead at once).
//   - larger than [WithMaxPayloadSize], routing key over 255 bytes: Permanent,
//     refused before sending, so batch-mates are unaffected.
//   - not connected, connection lost before the confirmation, the exchange
//     missing (404) or refused (403): [outbox.Unavailable].
//   - basic.nack (e.g. a queue full with overflow reject-publish): plain error.
//   - no confirmation before ctx ends: plain error wrapping ctx.Err().
//
// A message over the broker's own max_message_size (set WithMaxPayloadSize
// to it) would make the broker close the channel, failing the rest of the
// batch with plain errors.
package amqppub
