// Package kafkapub publishes outbox messages to Apache Kafka with the
// franz-go client (github.com/twmb/franz-go/pkg/kgo).
//
// [New] wraps a *kgo.Client that the caller built and closes; [NewClient]
// builds one from a kafka:// URL (seed brokers, TLS, SASL PLAIN or SCRAM),
// which is what the outbox daemon does.
//
// # Records
//
// Each message becomes one record on topic prefix + [outbox.Message.Destination]
// (its Topic, else its EventType; see [WithTopicPrefix]):
//
//   - key: [outbox.Message.Key], the aggregate id unless a partition key is set,
//     so that one aggregate's messages share a partition and keep their order;
//   - value: the JSON payload, as is;
//   - headers: [outbox.Message.StandardHeaders] (outbox-message-id,
//     outbox-aggregate-type, outbox-aggregate-id, outbox-event-type, the W3C
//     traceparent and tracestate, and the caller's own headers) and
//     content-type ([HeaderContentType], the payload's media type), sorted by name.
//
// # Delivery
//
// [Publisher.Publish] hands the whole batch to the client at once and waits
// for every record's acknowledgement within its context. With franz-go's
// defaults (idempotent producer, acks from all in-sync replicas) a nil result
// means the record is durable in Kafka and was written once in this producer
// session. Idempotence does not span sessions: a relay that restarts, or a
// record re-sent after a timeout, can be written twice. Consumers deduplicate
// on the outbox-message-id header.
//
// # Errors
//
//   - [outbox.Permanent]: Kafka refuses the record as such (MESSAGE_TOO_LARGE,
//     also decided by the client before sending, INVALID_RECORD, CORRUPT_MESSAGE,
//     POLICY_VIOLATION, and any other non-retriable error about the record), or
//     the topic name is not a legal Kafka name. Batch-mates are not affected.
//   - [outbox.Unavailable]: the destination as a whole cannot take records: no
//     broker can be reached, the client is closed, the topic does not exist,
//     or authorization failed. Fixing these needs no change to the messages.
//     An unknown topic is also [outbox.Unroutable], which a router route with
//     UnroutablePermanent turns into Permanent (dead at once).
//   - A plain error wrapping ctx.Err(): the record was not acknowledged before
//     the publish's deadline. When no broker answered a metadata request in
//     that time either (see [WithProbeAfter]), it is marked Unavailable too.
//   - Other errors (franz-go's retry limits, producer session errors) are plain:
//     the relay retries them with backoff.
//
// The Publisher never retries on its own beyond what the client does within
// the deadline, and never blocks past the context.
package kafkapub
