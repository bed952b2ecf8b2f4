// Package benchcmd is what `outbox bench` runs: it measures the outbox relay
// on a user's own database and broker (or on embedded SQLite and NATS), next
// to a textbook relay on the same database and broker, and reports the ratio.
//
// # Tests
//
// The drain test preloads a backlog of rows (100,000 by default) and times the
// relay until the broker has acknowledged every message. The latency test
// offers a steady rate of one-message transactions (1,000 a second for 10 s by
// default) and records, for each message, the time from its commit to the
// broker's acknowledgement, in an HDR histogram (p50, p90, p99, p99.9, max,
// and per second for the chart). Both report the process's CPU seconds and
// peak memory (resident and Go heap) while the relay worked; with embedded
// services those include the database and the broker.
//
// # The baseline
//
// The textbook relay is the loop most outbox tutorials show: every second,
// select up to 100 pending rows, publish them one by one waiting for each
// acknowledgement, and mark each one sent with its own UPDATE. It runs the
// same tests on the same database and broker, capped in time because it is
// slow, and the report divides: drain rate by drain rate, p99 by p99.
//
// # Output
//
// A table on out, or JSON ([Report]) for comparing runs; a progress bar on
// [Config.Progress]; and with [Config.Chart] an SVG chart of latency over
// time. A run creates its own table and NATS stream and removes them when it
// ends.
package benchcmd
