// Package outboxtest helps users test their own flows and consumers against
// the outbox: an in-memory [Publisher] that records what the relay sent,
// [FlushAndWait] that returns once everything committed so far is published,
// and fault injection at the three points where a real relay can crash
// ([CrashBeforePublish], [CrashAfterPublish], [CrashDuringAck]), so a test can
// replay the duplicates and delays production will produce into its consumer.
// [MemoryStore] is an outbox table in memory, for examples and for unit tests
// that need no database (it cannot share a transaction with business data).
//
// Use it with a real store (store/sqlitestore needs no server) so the test
// exercises the same SQL the service runs:
//
//	pub := outboxtest.NewPublisher()
//	relay, _ := outbox.NewRelay(store, pub)
//	// ... write messages in the service's own transactions ...
//	outboxtest.FlushAndWait(ctx, relay, store)
//	for _, m := range pub.Messages() { consumer.Handle(m) }
package outboxtest
