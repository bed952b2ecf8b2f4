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
//	  "payload": {"order_id": 42},            // the payload, byte for byte
//	  "headers": {"outbox-message-id": "...", "traceparent": "...", ...},
//	  "created_at": "2025-05-06T05:08:09Z"    // absent when unknown
//	}
//
// and the request headers are:
//
//	Content-Type: application/json
//	Idempotency-Key: <message id>  (a batch: "batch_" + a hash of its ids)
//	webhook-id: <the same>
//	webhook-timestamp: <Unix seconds>
//	webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">  (with WithSecret)
//	traceparent, tracestate: the message's trace context, when it has one
//
// Receivers check a request with [Verify] (signature and timestamp) and drop
// repeats by Idempotency-Key, or by the envelope's id: the outbox delivers at
// least once.
//
// # Results
//
// A 2xx answer confirms the message. 408, 429 and 5xx are plain errors that
// the relay retries with its own backoff (Retry-After is not used). Any other
// answer, redirects included, is [outbox.Permanent], with the status and the
// first bytes of the body in a [StatusError]. An endpoint that cannot be
// reached (connection refused or reset, DNS, TLS) is [outbox.Unavailable];
// no answer before the context ends is a plain error wrapping ctx.Err().
//
// At most [WithConcurrency] requests are in flight per Publisher. Messages
// with the same key go one after another, and after a failure that is not
// permanent the key's later messages in the batch are not sent, so a
// receiver never sees them out of order.
package webhookpub
