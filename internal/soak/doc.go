// Package soak holds the soak run of the outbox (`make soak`): a steady
// stream of business transactions writes 1,000,000 messages into PostgreSQL
// while two relay processes move them to NATS JetStream, deleting sent rows
// as they go, and are restarted along the way (SIGTERM and kill -9). It
// samples the relays' resident memory and the outbox table's size, and at the
// end checks that every message arrived, that memory stayed flat and the
// table bounded, and that every warning or error the relays logged is one it
// can explain. The run is TestSoak, skipped unless OUTBOX_SOAK=1; it takes
// about a quarter of an hour and writes a report (see docs/guarantees.md).
//
// Settings, from the environment: OUTBOX_SOAK_MESSAGES (default 1000000),
// OUTBOX_SOAK_RATE in messages per second (default 1200),
// OUTBOX_SOAK_RESTART_EVERY (default 2m30s), OUTBOX_SOAK_REPORT (a file to
// write the report to, in Markdown).
package soak
