// Package cli is the outbox command line: [Main] parses the arguments with
// urfave/cli and runs one of the commands.
//
// # Commands
//
//   - relay: run the daemon (internal/daemon) until SIGINT or SIGTERM, then
//     drain and exit 0. It also archives old sent rows on a schedule
//     (archive_every, on by default).
//   - migrate: create or upgrade the outbox table.
//   - status: print the table's backlog, as a table or --json, once or
//     every --interval with --watch.
//   - dead list|show|retry|discard: work the dead messages (outbox.Admin),
//     with filters; bulk actions ask for confirmation unless --yes, and
//     --dry-run changes nothing.
//   - archive: move (or --delete) sent rows older than --older-than in
//     batches of --batch rows until none are left, safe while relays run:
//     the relay's scheduled archive, once, by hand.
//   - demo: replay the lost-message incident, naive code against the outbox
//     (internal/demo).
//
// # Settings
//
// The relay's settings come from four places, highest precedence first: the
// command-line flags, the OUTBOX_* environment variables, the YAML file of
// --config (or OUTBOX_CONFIG), and the defaults. internal/config defines every
// setting once (its flag, variable, YAML key and default), and `outbox relay
// --help` lists them all.
//
// # Errors and exit codes
//
// Every failure is one line on stderr, starting with "outbox: ". The exit
// code is 0 on success, 1 for a runtime failure (unreachable database or
// broker, failed migration) and 2 for bad input (unknown command or flag, a
// malformed or invalid config file, a bad value in a flag or variable).
package cli
