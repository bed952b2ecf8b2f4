// Package pgcdc is change data capture for the outbox on PostgreSQL: a
// relay source that reads committed inserts from logical replication
// (the pgoutput plugin) instead of polling the table.
//
// # The slot
//
// [Setup] creates what streaming needs, idempotently: a publication of the
// table's inserts and a logical replication slot. A slot keeps every byte
// of write-ahead log its reader has not confirmed, also while no relay
// reads it: [SlotStatus] reports its lag, and [DropSlot] removes it when
// the relay is decommissioned (docs/operations.md).
package pgcdc
