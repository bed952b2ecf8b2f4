// Package inbox is the consumer's half of the outbox pattern: it turns
// at-least-once delivery into effects that happen once.
//
// The outbox delivers every committed message at least once, so a consumer
// sees duplicates: a relay that stopped after the broker confirmed a message
// but before it acknowledged the row sends it again, and brokers redeliver
// what a consumer did not acknowledge. [Inbox.Process] records each message's
// id in an inbox table in the same transaction as the handler's effect:
//
//	in, err := inbox.New(db, inbox.Postgres, inbox.WithConsumer("shipping"))
//	...
//	out, err := in.Process(ctx, msg, func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
//		_, err := tx.ExecContext(ctx, "INSERT INTO shipment (order_id) VALUES ($1)", m.AggregateID)
//		return err
//	})
//
// # Guarantees
//
//   - Once per consumer: the inbox row and the effect commit together, so for
//     one consumer name the effect of a message id happens at most once, with
//     any number of consumer instances delivering copies at the same time. A
//     duplicate is found by the table's primary key (consumer, message_id),
//     never by a read before the insert: a second copy's insert waits for the
//     first copy's transaction and then finds its row.
//   - No lost effect: a handler error rolls back the inbox row too, so the
//     message counts as not processed and its next delivery runs the
//     handler again ([HandlerError]).
//   - Acknowledge after commit: the consumers in the subpackages acknowledge
//     the broker only after Process returned, so a crash before the commit
//     means a redelivery, and one after it a duplicate the inbox absorbs.
//
// Retention bounds the promise: a copy delivered after its row was purged
// ([Inbox.Purge], WithRetention, default 7 days) is processed again.
//
// # Databases
//
// The inbox works on database/sql with a small dialect switch: [Postgres]
// (pgx's stdlib driver; from a pool, stdlib.OpenDBFromPool), [MySQL] (MySQL 8,
// MariaDB 10.6+) and [SQLite] (modernc.org/sqlite, with a busy timeout).
// [Inbox.Migrate] creates the tables from the migrations embedded in the
// package (migrations/<dialect>/).
//
// # Pre-filter
//
// [WithFilter] puts a fast, fallible check (package inbox/redisfilter, on
// Redis) in front of the table, so duplicates can skip the database; the
// table stays the source of truth, and a filter that fails only costs speed.
//
// # Business-state guard and sequence guard
//
// Where the effect is a state change, [StateGuard] makes it idempotent by
// itself: it moves a row to a state only from the expected states and
// reports [AlreadyApplied] for a second copy. Where order matters,
// [Inbox.AdvanceSeq] applies an aggregate's messages only in sequence.
//
// # Consumers
//
// The subpackages natsin (NATS JetStream), kafkain (Kafka consumer groups,
// franz-go), amqpin (RabbitMQ) and redisin (Redis Streams consumer groups)
// run a handler through an inbox, acknowledge the broker after the commit,
// process messages concurrently (optionally in order per key) and move a
// message whose handler keeps failing to a dead-letter destination.
// They read the message id from the headers the outbox publishers set
// (outbox.HeaderMessageID, Nats-Msg-Id, the AMQP message-id property, the
// stream field redispub.FieldMessageID) and hand the handler an *outbox.Message rebuilt from them.
package inbox
