// Package pgstore is the PostgreSQL store of the outbox, on pgx v5.
//
// A [Store] wraps a *pgxpool.Pool the caller built (and never closes it). It
// is an [outbox.Store] for relays, an [outbox.TxInserter] for writers on
// pgx.Tx, and through [Store.SQLTx] one for writers on database/sql
// transactions of the pgx stdlib driver:
//
//	store, err := pgstore.New(pool)           // table outbox_message
//	err = store.Migrate(ctx)                  // create or upgrade it
//	w := outbox.NewWriter(store)              // *outbox.Writer[pgx.Tx]
//	err = w.Write(ctx, tx, &outbox.Message{...})
//	relay, err := outbox.NewRelay(store, publisher)
//
// # The table
//
// [Store.Migrate] creates the table of the contract (id bigserial,
// message_id varchar(64) unique, aggregate_type, aggregate_id and event_type
// varchar(64), payload jsonb, status smallint, retry_count integer,
// next_retry_at, created_at and updated_at timestamptz, an index on (status,
// next_retry_at) and one on (aggregate_type, aggregate_id)) plus columns of
// its own: headers jsonb (trace context and the caller's headers), topic and
// partition_key varchar(255), last_error text, content_type and
// payload_bytes, deliver_at and expires_at timestamptz (delayed and expiring
// messages, docs/table-contract.md), a partial index on the
// pending rows for the claim path, and one on (aggregate_type, aggregate_id,
// id) of the pending and dead rows for ordered claims.
//
// A Store also works on a table that has only the contract columns, such as
// one a team already had (under other names with [WithColumns]): it reads
// the table's columns on first use and
// leaves out what is missing (headers, topic and partition key are then not
// stored, and errors not recorded). Such a table may keep its payload in a
// json or text column and its times in timestamp without time zone (read in
// the session's time zone); a row whose payload is not JSON, or with a NULL
// in message_id, aggregate_type, aggregate_id, event_type or payload, comes
// back in [outbox.Claim] Malformed so the relay can mark it dead.
//
// A jsonb payload (the default) is stored parsed: it comes back equal as
// JSON but not byte for byte (PostgreSQL normalizes spaces and key order and
// drops duplicate keys). Keep the payload in a json or text column if
// consumers need the exact bytes, for example to check a signature.
//
// # Claiming
//
// A claim is one statement: a SELECT ... ORDER BY id LIMIT n FOR UPDATE SKIP
// LOCKED of due pending rows feeding an UPDATE that adds one to retry_count
// (the attempt, and the fencing token) and sets next_retry_at to the
// database's now() plus the lease. The statement commits on its own, so the
// attempt is counted even if the relay then crashes, and no transaction stays
// open while the relay publishes. Ack, Reschedule and Kill are one statement
// each for the whole batch, over unnest() of the rows' ids and attempts, and
// change a row only while retry_count still equals the attempt and the row is
// pending: a relay that lost its lease changes nothing.
//
// A Store remembers where its claims got to: while they come back full, the
// next unordered claim starts after the highest id claimed so far instead of
// stepping over the rows of the batches still in flight, and at least every
// 250 ms one starts from the first due row, so a row passed over waits at
// most that long. Use one Store per relay process, shared by that process's
// relays.
//
// Three options change how a claim works; docs/design.md says why we lease
// and docs/tuning.md what each costs and gains, with its figures:
// [WithHeldClaims] claims, publishes and settles a batch inside one open
// transaction (each row written once, but an attempt that crashed the relay
// is not counted, and a connection is held per batch in flight);
// [WithBatchLease] leases a batch with one row of a side table (every relay
// on the table must use it); [WithAsyncCommit] commits the relay's own
// statements without waiting for the disk (a database crash can then cost
// duplicates or an uncounted attempt, never a message).
//
// Ordered claims (outbox.WithOrdering) hand out runs: per aggregate, a
// prefix of its pending rows in id order, none of which has an earlier row
// of its aggregate pending (or dead, with BlockOnDead) outside the claim;
// the relay publishes them in waves (message k+1 only after the broker
// confirmed k). Ids are assigned at insert, not at commit, so transactions
// that write messages for one aggregate should be serialized, as a lock on
// the aggregate's own row does. With [WithBatchLease] ordered claims take
// heads only. docs/ordering.md has how and what it costs.
//
// # Notifications
//
// With [WithNotify], writes send a NOTIFY that commits with them and
// [Store.Listen] wakes the relay, so a message goes out within milliseconds
// rather than at the next poll; the relay coalesces the wake-ups of a burst
// into one claim and polls while the listener is down. PostgreSQL commits
// notifying transactions one at a time, so a busy writer should coalesce its
// notifications with [WithNotifyInterval] (at most one notifying transaction
// per interval; the relay's adaptive polling finds the rest). Writers that do
// not use this package get notifications from a statement-level trigger that
// [Store.Migrate] installs with [WithNotifyTrigger].
//
// # Operations
//
// Store implements [outbox.Admin] for `outbox dead` and `outbox archive`:
// [Store.ListDead], [Store.RetryDead] and [Store.DiscardDead] work on dead
// rows in statements of at most 1,000 rows, and [Store.Archive] moves old
// sent rows into [Store.ArchiveTable] (or deletes them) a batch at a time.
// [Store.Stats] feeds `outbox status` and the metrics.
//
// # Names
//
// The table name is checked by [New] against a strict pattern and quoted
// with pgx.Identifier; values always travel as parameters.
package pgstore
