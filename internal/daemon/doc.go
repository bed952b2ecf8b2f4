// Package daemon is the outbox relay process that `outbox relay` runs: it
// turns a [config.Config] into a database pool and store, publishers for the
// brokers, the routing between them, N relay loops and an HTTP health server.
//
// # Wiring
//
// Databases are chosen by URL scheme: postgres:// and postgresql:// (a pgx
// pool and store/pgstore), sqlite://PATH (store/sqlitestore) and
// mysql://user:pass@host:3306/db (go-sql-driver and store/mysqlstore).
// Brokers likewise: nats:// (a NATS connection, a JetStream stream that the
// daemon creates or extends to capture the broker's subjects, and
// publisher/natspub), kafka:// (publisher/kafkapub), amqp:// and amqps://
// (publisher/amqppub), redis:// and rediss:// (publisher/redispub),
// http:// and https:// (publisher/webhookpub; {destination} in the URL is
// replaced by each message's destination), mqtt:// and mqtts://
// (publisher/mqttpub). With one broker, no routes and no topic template the
// relays publish to it directly; otherwise through publisher/router, built
// from the config's routes and default route. A message no route takes is
// marked dead with the reason.
//
// # Database pool
//
// The relay's pool is its own and bounded: config.Config.PoolSize, by
// default one connection per relay loop (a loop claims, publishes and
// acknowledges one after the other, so it never holds two) plus two spare
// for health checks. With held_claims (and without ordering) a loop holds a
// connection per batch in flight while the batch is published, so the
// default becomes max_in_flight connections per loop plus the two spare;
// an explicit db_max_conns below that makes claims wait for a connection. A
// PostgreSQL LISTEN (notify: true) holds one more connection per loop,
// outside the pool.
//
// # Lifecycle
//
// [New] checks the config and does no I/O. [Daemon.Run] connects, checking
// that the database and every broker answer within 10 s, so that a wrong
// address stops the daemon at once with the reason; later outages are the
// relays' business (they pause and probe). When Run's context is cancelled,
// every relay finishes its batch in flight and acknowledges it, the health
// server shuts down, and Run closes the brokers and the pool and returns nil.
//
// # Scheduled archive
//
// Unless archive_every is 0 or delete_sent is on, the daemon takes sent rows
// last updated more than archive_older_than ago (7 days) out of the table
// every archive_every (1 h), a first time a minute after it starts (sooner
// when archive_every is shorter). A run calls outbox.Admin.Archive, one
// short transaction of archive_batch rows at a time, until a call takes
// fewer than a batch, resting between batches as long as the batch took
// (10 ms to 1 s), so that it holds one connection at most about half the
// time. The rows go to the archive table (the table's name plus _archive,
// created by the first run) or, with archive_delete, are deleted. Rows are
// picked with SKIP LOCKED where the database has it, so relays and other
// daemons archiving the same table never wait on each other. Each run logs
// one line ("archive run done" with rows, batches and duration; "archive
// run failed, will retry" at Warn); a failed run never stops the relays.
// Shutdown cancels the batch in flight, which rolls back. With an HTTP
// address the runs are counted in outbox_archived_total and
// outbox_archive_runs_total (package metrics).
//
// # Table check
//
// Before it starts the relays, Run checks the table (outbox.TableChecker):
// a table that does not exist, lacks contract columns or has a column of a
// type the relay cannot read makes Run fail with every problem and its fix,
// so `outbox relay` exits 1 instead of starting and failing every claim.
//
// # Metrics, health and traces
//
// With an HTTP address (config http, --http 127.0.0.1:9090), the relay loops report
// to Prometheus metrics (package metrics, relay label = config name), the
// table's backlog is read every stats_interval, and the daemon serves
// /metrics, /healthz (200 while the process runs) and /readyz (200 when the
// database, "store", and every broker, "broker NAME", answer a ping and the
// claims are not failing, "claims"; 503 naming the failed checks otherwise,
// with their errors only when the config sets readyz_details; one round of
// checks answers the requests of the next second). [WithHandler] mounts more handlers and
// [WithRelayHooks] adds relay hooks. With trace_exporter stdout or otlp,
// every publish gets a span continuing the trace recorded at write time
// (package tracing); the spans are flushed when Run returns.
//
// # Logs
//
// The daemon logs with log/slog, text or JSON ([NewLogger]); it never logs a
// DSN, a secret or a payload, and it removes passwords from the errors of
// drivers before returning or logging them.
package daemon
