// Package outbox implements the transactional outbox pattern for Go services.
//
// A [Writer] inserts messages in the caller's own transaction, so they become
// visible exactly when the business rows do. A [Relay] claims committed
// messages through a [Store], sends them with a [Publisher] and acknowledges
// them; failures are retried with backoff, and a message that used its
// attempts or was refused for good is marked dead.
//
// The contract: a message is published only if its transaction committed, at
// least once (across relay crashes, broker outages and database restarts),
// twice only when a relay stopped or lost its lease between the broker's
// confirmation and the acknowledgement (the message ID travels with every copy
// for deduplication), and a poison message never blocks the others. With
// [WithOrdering] keeps each aggregate's messages in write order.
//
// The cost: one INSERT per message in the caller's transaction; per batch, one
// claim (a short transaction that counts the attempt) and one acknowledging
// statement; an idle relay makes one claim per poll interval.
//
// Stores live under store/, publishers under publisher/; this package imports
// none of them. docs/design.md walks through the cycle and the claim;
// docs/tuning.md sizes it.
package outbox
