// Package kafkain consumes Kafka records (a franz-go consumer group) through
// an inbox: each record's handler runs in the inbox transaction, and its
// offset is committed only after that transaction committed.
//
//	c, err := kafkain.New(in, handle, kafkain.Params{
//		Group: "shipping", Topics: []string{"ORDER_PAID"},
//		ClientOpts: []kgo.Opt{kgo.SeedBrokers("localhost:9092")},
//	}, kafkain.WithConcurrency(8), kafkain.WithOrderedKeys(true), kafkain.WithDeadLetterTopic("shipping.dead"))
//	err = c.Run(ctx)
//
// # Messages
//
// The handler gets an *outbox.Message rebuilt from the record headers that
// publisher/kafkapub sets (outbox-message-id, outbox-aggregate-type,
// outbox-aggregate-id, outbox-event-type), with all headers in Headers, the
// topic in Topic, the record key in PartitionKey, the value in Payload and the
// record timestamp in CreatedAt.
// The content-type header (kafkapub sets it) goes to ContentType.
//
// # Offsets
//
// The consumer polls up to WithMaxPollRecords records, processes them
// (concurrently with WithConcurrency; per key in order with
// WithOrderedKeys), and then commits, per partition, the offset after the
// last record of the prefix that is done. Rebalances are held back
// (kgo.BlockRebalanceOnPoll) until then, so a partition never changes hands
// with work done but uncommitted. A record whose transaction did not finish
// (the consumer stopped) and the records after it in its partition are
// delivered again; the inbox absorbs the ones that had committed.
//
// # Failures
//
// A failing handler is retried in place with backoff. Kafka does not count
// deliveries, so attempts are counted per process; after WithMaxAttempts
// the record is produced to the dead-letter topic (WithDeadLetterTopic) and
// committed past. Without one it is retried until it succeeds, and the
// member's partitions wait. An outage of the inbox's database does not count as an attempt.
package kafkain
