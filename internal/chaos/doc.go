// Package chaos is the outbox's fault-injection suite and the checker that
// judges its runs.
//
// The suite itself is TestChaos (in this package's tests): for each cell
// TestChaos/<db>/<broker>/<fault> it starts a private database server
// (PostgreSQL or MariaDB, on a data directory of its own: the shared
// servers are never touched; the postgres-cdc columns run PostgreSQL with
// wal_level = logical and relays with --source cdc sharing one replication
// slot, which the harness drops at the end, with kept rows or, in
// postgres-cdc-deleted, rows the writer deletes; the -contract columns
// drop the claim indexes Migrate adds, leaving the table contract's two)
// and a private broker (nats-server with
// JetStream, or redis-server with an fsynced AOF), three relay processes of
// the real `outbox relay` binary reaching the broker through a TCP fault
// proxy, producers writing business rows and outbox rows in real
// transactions (10% rolled back on purpose, a few slow to commit), and a
// consumer reading the broker with a client of its own. A nemesis injects
// the scenario's fault while the producers run, then heals everything; the
// producers stop; the suite drains (every row sent, the consumer caught up
// with the broker) and hands the history to [Check].
//
// # Faults
//
//   - kill9: SIGKILL a random relay every 1-2.5 s, start it again.
//   - sigstop: SIGSTOP a relay for longer than the lease, then SIGCONT (a
//     zombie wakes up in a batch another relay took over).
//   - broker-cut: reset or blackhole the relays' broker connections.
//   - broker-restart: SIGKILL the broker, start it on the same data.
//   - db-restart: SIGKILL the database server (every process), restart it.
//   - db-freeze: blackhole the relays' database connections (they reach the
//     database through a second fault proxy) for longer than their store
//     timeout, then heal; during the first freeze one relay is stopped with
//     SIGTERM and must exit within the publish timeout plus a few seconds.
//   - pool: fill the database's connection slots and end the relays'
//     connections; the relays have small pools of their own, the business
//     pool keeps serving.
//   - longtx: transactions hold early outbox ids open for seconds while
//     later ids commit (commit order is not id order).
//
// # Running
//
// `go test ./internal/chaos` runs a short form (seconds per scenario, eight cells);
// `make chaos` sets OUTBOX_CHAOS=full and runs every cell longer, writing
// every report to docs/guarantees-last-run.json. OUTBOX_CHAOS_SEED replays
// a run's schedule, OUTBOX_CHAOS_LOAD sets how long producers run, and
// OUTBOX_CHAOS_KEEP=1 keeps data directories and logs of passing runs
// (failing runs always keep them).
//
// # Checker
//
// [Check] takes what producers attempted and how each transaction ended
// ([Produce]), what the database holds after the run ([Row], the ground
// truth), what the consumer read ([Delivery]) and the faults with what was
// in flight at each ([Fault]), and returns a [Report]: committed, rolled
// back, delivered, lost, unexpected, aborted (delivered though rolled
// back), duplicates split into explained and unexplained, and order
// violations per aggregate. [Report.Violations] lists what breaks the pass
// condition; [Table] formats reports for humans.
package chaos
