// Package redisin consumes Redis Streams entries, read in a consumer group,
// through an inbox: each entry's handler runs in the inbox transaction, and
// the entry is acknowledged (XACK) only after that transaction committed.
//
//	c, err := redisin.New(rdb, "ORDER_PAID", "shipping", in, handle, redisin.WithConcurrency(8),
//		redisin.WithDeadLetterStream("shipping:dead"))
//	err = c.Run(ctx)
//
// # Entries
//
// The handler gets an *outbox.Message rebuilt from the fields that
// publisher/redispub writes (redispub.FieldMessageID and the others): the
// outbox fields, the headers field (a JSON object) in Headers, the key
// field in PartitionKey, the stream in Topic, the payload in Payload and
// created_at in CreatedAt.
// The content_type field (redispub sets it) goes to ContentType.
//
// # Pending entries
//
// An entry a consumer read but did not acknowledge stays pending in the
// group. A consumer that restarts under the same name (WithConsumerName)
// re-reads its own pending entries first; entries left idle for longer than
// WithClaimIdle, by a consumer that died or stopped mid-handler, are claimed
// (XAUTOCLAIM) by any running consumer, and the group's delivery counter
// counts them as delivered again.
//
// # Failures
//
// A failing handler is retried in place with backoff, and the entry is
// re-claimed meanwhile so its idle time stays low. After WithMaxAttempts
// (counting earlier deliveries) the entry is added to the dead-letter stream
// (WithDeadLetterStream) and acknowledged. Without one it is retried until
// it succeeds: it is never dropped. An outage of the inbox's database does
// not count as an attempt; Redis errors are logged and retried.
package redisin
