// Package pgcdc is the change-data-capture relay source for PostgreSQL: a
// [Source] reads the inserts of the outbox table from the write-ahead log
// through logical replication (the built-in pgoutput plugin, via
// github.com/jackc/pglogrepl) and hands them to an [outbox.Relay] as a
// store would, in commit order, without polling the table.
//
// # How it works
//
// [Source.Run] keeps one replication connection streaming the slot. Each
// inserted row whose status is 0 becomes an entry of an in-memory window,
// in commit order. [Source.Claim] hands entries out (with ordering, each
// aggregate's run up to its first entry in flight or waiting for a retry); Ack, Reschedule and Kill settle
// them: kept rows are marked sent or dead in the table in one statement per
// batch, rows that the writer deleted in its own transaction
// (outbox.WithDeleteAfterInsert) leave nothing to mark, and a dead one is
// inserted as a dead row (status 2, which the stream ignores) so that
// `outbox dead list` shows it. The position confirmed to the server is the
// end of the last transaction that, with all before it, is settled whole.
//
// # Guarantees
//
//   - No loss: a message is confirmed only once the broker acknowledged it or
//     it is recorded dead; a relay killed at any point reads the
//     unconfirmed part of the log again from the slot.
//   - Bounded duplicates: only messages settled after the last confirmation
//     (one status interval, and at most the window) are published again,
//     with the same message id.
//   - Atomic: pgoutput sends committed transactions only.
//   - Order: commit order, with one batch in flight and no retries; per
//     aggregate with ordering on (a message waiting for a retry holds back
//     its aggregate's later ones, not the stream).
//   - Memory: at most WithMaxWindow messages; past it the source stops
//     reading and the server holds the log.
//
// # Failover
//
// With [WithFallback] (a pgstore.Store on the same table), the source
// polls the table when the stream has been down for the failover time,
// when the server refuses replication, and after it had to create the slot
// again (dropped, or invalidated by max_slot_wal_keep_size), until no row
// written before the new slot is pending; then it streams again. Rows the
// polling relay sent are skipped when the stream reads them again (their
// status is no longer 0); the copies published twice are counted
// ([Source.Duplicates]). Messages whose rows the writer deleted exist in
// the log only: while the slot survives, nothing is lost; if the slot is
// lost, such messages are lost with it.
//
// # The slot
//
// [Setup] creates what streaming needs, idempotently: a publication of the
// table's inserts and a logical replication slot (outbox migrate --cdc
// calls it). A slot keeps every byte of write-ahead log its reader has not
// confirmed, also while no relay reads it: [SlotStatus] reports its lag,
// and [DropSlot] removes it when the relay is decommissioned
// (docs/operations.md).
//
// # Standby
//
// Only one connection can stream a slot. A second Source on the same slot
// stands by (its claims return nothing) and tries to start streaming every
// retry interval, taking over when the first one's connection ends.
//
// docs/cdc.md has the whole design.
package pgcdc
