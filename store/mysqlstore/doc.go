// Package mysqlstore is the outbox [outbox.Store] for MySQL 8.0+ and MariaDB
// 10.6+ (InnoDB), through database/sql and github.com/go-sql-driver/mysql.
// Both need FOR UPDATE SKIP LOCKED, which older versions lack.
//
// # Use
//
//	db, err := mysqlstore.Open("app:secret@tcp(db:3306)/shop") // parseTime, UTC, interpolateParams (see DSN)
//	store, err := mysqlstore.New(db)
//	err = store.Migrate(ctx)
//	w := outbox.NewWriter(store) // *outbox.Writer[*sql.Tx]
//	relay, err := outbox.NewRelay(store, publisher)
//
// # The table
//
// [Store.Migrate] creates the contract's table (id BIGINT UNSIGNED
// AUTO_INCREMENT, message_id VARCHAR(64) UNIQUE, aggregate_type,
// aggregate_id and event_type VARCHAR(64), payload JSON, status TINYINT,
// retry_count INT, next_retry_at, created_at and updated_at DATETIME(6),
// indexes on (status, next_retry_at) and (aggregate_type, aggregate_id))
// plus headers JSON, topic and partition_key VARCHAR(255), last_error TEXT,
// content_type and payload_bytes, deliver_at and expires_at DATETIME(6)
// (delayed and expiring messages, docs/table-contract.md),
// an index on (status, id) for the claim path and one on (status,
// aggregate_type, aggregate_id, id) for ordered claims; InnoDB, utf8mb4 with
// a binary collation.
//
// A Store also works on a table that a team already has, such as the widely
// pasted one with DATETIME (whole seconds) columns and CURRENT_TIMESTAMP
// defaults: it reads the table's columns and indexes on first use and leaves
// out what is missing (headers, topic and partition key are then not stored,
// and errors not recorded). With whole-second DATETIME columns, leases and
// retry times have a resolution of one second (MariaDB truncates the
// fraction, MySQL rounds it). Migrate, run on such a table, adds the optional
// columns and the two indexes and changes nothing else.
//
// On MariaDB, JSON is a LONGTEXT with a JSON_VALID check and keeps the
// payload byte for byte; MySQL 8 stores JSON parsed and gives it back
// normalized (equal as JSON, not as bytes). A payload that is not valid
// UTF-8 JSON (possible in a hand-made LONGTEXT or BLOB column), or a NULL in
// message_id, aggregate_type, aggregate_id, event_type or payload, comes back
// in [outbox.Claim].Malformed so that the relay can mark it dead.
//
// # Time
//
// The Store keeps every DATETIME in UTC: it compares and writes with
// UTC_TIMESTAMP(6), binds times as UTC text, and reads a DATETIME's wall
// clock as UTC whatever the driver's loc, so leases and retries are right in
// any session time zone. Rows written by other code through CURRENT_TIMESTAMP
// defaults are UTC only when the session's time zone is; [DSN] and [Open]
// set it to '+00:00' for that reason. Only created_at (message age) and
// updated_at (Stats' sent counts) of such rows are affected otherwise.
//
// # Claiming
//
// A claim is a short READ COMMITTED transaction: SELECT ... ORDER BY id LIMIT
// n FOR UPDATE SKIP LOCKED of due pending rows (forced onto the (status, id)
// index when the table has one, so that it locks only the rows it takes),
// one UPDATE of their ids that adds one to retry_count (the attempt, and the
// fencing token) and sets next_retry_at to now plus the lease, and COMMIT.
// MariaDB's UPDATE has no RETURNING, so the rows are read by the locking
// SELECT; while they are locked nobody else can change them. Ack, Reschedule
// and Kill are one statement per 1,000 messages, changing a row only while
// it is pending and its retry_count still equals the attempt: a relay that
// lost its lease changes nothing. Ack matches rows with a primary-key IN
// list (id IN (...) AND retry_count = ? when the batch shares one attempt,
// (id, retry_count) IN (...) otherwise); Reschedule and Kill, which carry a
// time or a reason per row, join a derived table of the batch's ids,
// attempts and values. Statements lock rows in id order, and one that InnoDB
// picks as a deadlock victim is run again.
//
// Ordered claims hand out runs: per aggregate, a prefix of its pending rows
// in id order, none of which has an earlier row of its aggregate pending (or
// dead, with BlockOnDead) outside the claim. The claim locks the first due
// rows as an unordered one does, then keeps, after a fresh read in the same
// transaction, the prefix of each aggregate it locked: that read is what
// keeps order under InnoDB's mix of read modes. Ids are
// assigned at insert, not at commit, so transactions that write messages
// for one aggregate should be serialized, as a lock on the aggregate's own
// row does. docs/ordering.md has how and what it costs.
//
// MariaDB marks SKIP LOCKED unsafe for statement-based replication: run its
// binary log in ROW (or MIXED) format.
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
// with backticks; values always travel as parameters.
package mysqlstore
