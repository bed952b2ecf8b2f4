// Package webhookpub publishes outbox messages as HTTP POST requests
// (webhooks), signed the Standard Webhooks way so receivers can trust them.
//
// # Requests
//
// [New] takes the endpoint URL; "{destination}" in it is replaced by each
// message's destination ([outbox.Message.Destination]: its Topic, else its
// EventType). By default each message is one request; [WithBatch] POSTs JSON
// arrays instead. The body is an [Envelope]:
//
//	{
//	  "id": "0191e7a4-...",                  // the message id
//	  "type": "ORDER_PAID",                   // the event type
//	  "topic": "ORDER_PAID",                  // the destination
//	  "key": "42",                            // the partition key (aggregate id unless set)
//	  "aggregate": {"type": "order", "id": "42"},
//	  "content_type": "application/json",     // the payload's media type
//	  "payload": {"order_id": 42},            // a JSON payload, byte for byte
//	  // or, for any other content type (Protobuf, Avro, text):
//	  // "payload_base64": "CJYB...",         // the payload in standard base64
//	  "headers": {"outbox-message-id": "...", "traceparent": "...", ...},
//	  "created_at": "2025-05-06T05:08:09Z"    // absent when unknown
//	}
//
// and the request headers are:
//
//	Content-Type: application/json  (WithRawBody: the message's content type)
//	Idempotency-Key: <message id>  (a batch: "batch_" + a hash of its ids)
//	webhook-id: <the same>
//	webhook-timestamp: <Unix seconds>
//	webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">  (with WithSecret)
//	traceparent, tracestate: the message's trace context, when it has one
//
// With [WithRawBody] the body is the payload itself, byte for byte, the
// Content-Type is the message's content type, and every standard header
// (outbox-message-id, outbox-event-type, ..., traceparent and the writer's
// own) is a request header; the other headers above stay.
//
// Receivers check a request with [Verify] (signature and timestamp) and drop
// repeats by Idempotency-Key, or by the envelope's id: the outbox delivers at
// least once.
//
// # Results
//
// A 2xx answer confirms the message. The status codes of
// [WithPermanentStatus] (by default [DefaultPermanentStatus]: every 4xx but
// 401, 403, 404, 408 and 429) are [outbox.Permanent], with the status and
// the first bytes of the body in a [StatusError]; any other answer (401 after
// a key rotation, 404 during a deploy, 5xx, and 3xx: redirects are not
// followed) is a plain error that the relay retries with its own backoff
// (Retry-After is not used). An endpoint that cannot be reached (connection
// refused or reset, DNS, TLS) is [outbox.Unavailable]; no answer before the
// context ends is a plain error wrapping ctx.Err(). A destination that would
// not stay one path segment (empty, ".", "..", a slash) is permanent for
// that message alone.
//
// # Secrets
//
// The endpoint URL (its user information, path and query), the header
// values of [WithHeader] and the signing secret are secrets: no error of
// the package holds them. A URL in an error is its scheme and host, with
// "/REDACTED" for a path, and they are replaced by REDACTED in the start of
// a refusing response's body, where a receiver may echo them. The signing
// key must have at least [MinKeyBytes] bytes.
//
// At most [WithConcurrency] requests are in flight per Publisher. Messages
// with the same key go one after another, and after a failure that is not
// permanent the key's later messages in the batch are not sent, so a
// receiver never sees them out of order.
package webhookpub
