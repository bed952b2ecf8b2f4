// Package sqlitestore is the outbox [outbox.Store] for SQLite, through
// database/sql and the pure-Go modernc.org/sqlite driver (no cgo). It is the
// embedded default: one file, no server.
//
// # Use
//
//	db, err := sqlitestore.Open("app.db") // WAL, synchronous=FULL, busy_timeout, BEGIN IMMEDIATE
//	store, err := sqlitestore.New(db)
//	err = store.Migrate(ctx)
//	w := outbox.NewWriter(store) // *outbox.Writer[*sql.Tx]
//	err = store.Tx(ctx, func(tx *sql.Tx) error { /* business rows */ return w.Write(ctx, tx, msg) })
//	relay, err := outbox.NewRelay(store, publisher)
//
// A service writes its business rows and its messages in one *sql.Tx through
// the Writer, best inside [Store.Tx]; a relay claims the committed messages
// through the Store.
//
// # Concurrency
//
// SQLite admits one writer at a time. Every claim is one UPDATE ... RETURNING
// in a write transaction (the statement writes first, so the transaction
// holds the write lock from its first step, as BEGIN IMMEDIATE does), so
// relays in one process or in several processes take turns and never share
// a row. In one process the Store's writes queue in Go, fairly, and so do
// the service's transactions run through [Store.Tx]; a transaction begun
// directly on the *sql.DB meets them at SQLite's lock instead, where a
// waiting connection sleeps in steps of up to 100 ms, the latency's tail
// (docs/benchmarks.md measures both). Between processes writes wait under
// busy_timeout. Because the write lock is held from
// a transaction's first write to its commit, ids are handed out in commit
// order. A claim walks an index of the pending rows in id order and stops at
// its limit, so its cost follows the rows it skips (leased or waiting to
// retry), not the size of the table or of the backlog.
//
// [Open] is the recommended way to get the *sql.DB. A *sql.DB opened
// otherwise works too, but should at least set a busy_timeout: without one,
// a write that meets another process's lock fails at once.
//
// # Schema and timestamps
//
// [Store.Migrate] creates the table with the contract's columns (id INTEGER
// PRIMARY KEY AUTOINCREMENT, message_id, aggregate_type, aggregate_id,
// event_type, payload, status, retry_count, next_retry_at, created_at,
// updated_at) plus headers, topic, partition_key, last_error, content_type,
// payload_bytes, deliver_at and expires_at (UTC text), and the
// indexes on (status, next_retry_at), (aggregate_type, aggregate_id) and on
// pending rows. JSON (payload, headers) is TEXT, checked when read: a payload
// that is not valid UTF-8 JSON comes back in [outbox.Claim].Malformed.
//
// The Store writes timestamps as UTC text in SQLite's datetime() form with
// microseconds ("2024-05-01 12:30:00.123456") and compares them with
// SQLite's julianday(), so it reads any of SQLite's time formats: "YYYY-MM-DD
// HH:MM[:SS[.fff…]]" with a space or a T, with an optional Z or ±HH:MM zone
// (text without a zone is UTC, as CURRENT_TIMESTAMP writes it), or unix
// seconds as an integer. Comparisons resolve to the millisecond. A table
// made by hand with DATETIME or TEXT columns and CURRENT_TIMESTAMP defaults
// works as is. A next_retry_at that SQLite cannot read counts as due, so a
// garbled row is retried rather than stuck.
//
// # Operations
//
// Store implements [outbox.Admin] for `outbox dead` and `outbox archive`:
// [Store.ListDead], [Store.RetryDead] and [Store.DiscardDead] work on dead
// rows in statements of at most 1,000 rows, and [Store.Archive] moves old
// sent rows into [Store.ArchiveTable] (or deletes them) a batch at a time.
// [Store.Stats] feeds `outbox status` and the metrics.
//
// # Hand-made tables
//
// The Store works on any table with the contract's columns. It detects once,
// on first use, whether the optional columns exist, and leaves out what a
// table lacks (headers, topic and partition_key are then not stored, and
// last_error is not kept).
package sqlitestore
