// Package outbox implements the transactional outbox pattern for Go services.
//
// A service writes its business rows and the messages that describe them in one
// local transaction, through a [Writer]. Committing makes both visible together;
// rolling back removes both. A [Relay] then claims committed messages from the
// outbox table through a [Store], sends them with a [Publisher], and acknowledges
// them, retrying failures with exponential backoff and jitter and marking a
// message dead once it has used its attempts or was refused for good.
//
// # Guarantees
//
//   - Atomic: a message is published only if the transaction that wrote it committed.
//   - No loss: every committed message is published at least once, across relay
//     crashes, broker outages and database restarts.
//   - Bounded duplicates: a message is sent twice only when a relay stopped (or
//     lost its lease) between the broker's confirmation and the acknowledgement.
//     The message ID travels with every copy so brokers and consumers can drop it.
//   - Isolation of failures: a poison message is dead-lettered and never blocks
//     unrelated messages.
//
// # Packages
//
// Stores live in store/pgstore (PostgreSQL, pgx v5), store/sqlitestore (SQLite,
// pure Go) and store/mysqlstore. Publishers live under publisher/. The root
// package imports none of them.
//
// # Claiming
//
// A claim takes up to a batch of due rows with FOR UPDATE SKIP LOCKED (or the
// database's equivalent), and in the same short transaction increments the
// row's retry_count and pushes next_retry_at to the end of a lease. The new
// retry_count is the claim's fencing token: an acknowledgement only matches the
// row while retry_count still equals it, so a relay whose lease expired and was
// taken over acknowledges nothing. Because the attempt is counted when the row
// is claimed, a message that crashes the relay every time still reaches
// max attempts and goes dead instead of looping forever.
package outbox
