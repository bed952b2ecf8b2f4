// Package demo is what `outbox demo` (and `make demo`) runs: the incident
// that the transactional outbox pattern exists for, replayed on real parts
// and counted.
//
// # The story
//
// A payment service marks orders paid; a shipping service ships each order
// when the "order paid" message reaches it. Halfway through, the network
// between the payment service and the broker goes dark: it stops answering
// for a while (publishes hang until they time out), then connections are
// refused (publishes fail at once), then the network is back. A few payments are
// declined: their transaction rolls back after the order was marked paid.
//
// [Run] plays this three times at once, each path with its own tables and
// its own stream, on the same schedule and through the same outage:
//
//   - naive: mark the order paid, commit, then publish; on failure retry
//     once, then log the error and move on. The incident: paid orders that
//     never ship ("stuck").
//   - publish-first: publish, then commit. A failed publish refuses the
//     payment, but a declined payment's message is already out: orders that
//     ship without being paid ("ghosts").
//   - outbox: the order's UPDATE and the message go in one transaction
//     through an [outbox.Writer]; an [outbox.Relay] publishes committed
//     messages and retries until the broker takes them.
//
// The hand-written paths publish with the NATS client directly, one request
// with [PublishTimeout] per attempt, and no Nats-Msg-Id (as such code
// usually does); the relay uses publisher/natspub with the same timeout.
// Every path and the relay reach the broker through an
// internal/faultproxy proxy, over real TCP, so the outage meets them all the
// same way. The shipping services read the streams over a connection of
// their own, outside the outage, and process each message through an
// inbox.Inbox, which absorbs duplicate deliveries by message id.
//
// # What is counted
//
// Once every path has delivered what it is going to deliver (the outbox
// table has nothing pending and every shipping service has processed its
// whole stream), Run reads the orders and shipments tables and compares them:
// orders paid, payments that failed, shipment messages delivered, paid but
// not shipped, shipped but never paid. Duplicates seen and absorbed, failed
// publish attempts and lost messages come from counters of the code that
// ran. [Summary] holds every count; Run also prints them side by side.
//
// # Where it runs
//
// With a zero [Config] it needs no server: each service gets a SQLite file in
// a temporary folder (store/sqlitestore's settings, but synchronous=NORMAL:
// the files are deleted at the end), and NATS JetStream runs inside the
// process (nats-server/v2), storing in the same folder. Config.DB
// ("postgres://...") and Config.Broker ("nats://...") run the same demo on a
// real PostgreSQL (store/pgstore) and NATS, in tables and streams named after
// a random run id, which are dropped when the run ends.
//
// # Progress
//
// While it runs, Run shows the payments, the broker's state and the
// shipments so far: as two lines redrawn in place when its output is a
// terminal, as a line per second (and per event) otherwise.
package demo
