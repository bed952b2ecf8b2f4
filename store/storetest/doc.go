// Package storetest is the conformance suite that every [outbox.Store] runs
// against its real database.
//
// A store's test file builds a [Harness] (how to get a fresh, migrated table
// for one test, and how to reach the same database with raw SQL) and calls
// [Run]:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			Dialect: storetest.Postgres,
//			New: func(t *testing.T) *storetest.Fixture {
//				pool, _, _ := testsvc.PostgresSchema(t)
//				s, err := pgstore.New(pool)
//				require.NoError(t, err)
//				require.NoError(t, s.Migrate(t.Context()))
//				return &storetest.Fixture{Store: s, Write: ..., DB: ..., Table: "outbox_message"}
//			},
//		})
//	}
//
// # What it checks
//
// Each behaviour the root package's Store documentation promises is a
// subtest that runs in parallel with the others, each on its own table:
// claiming due rows in id order with the attempt counted and a lease taken,
// the lease expiring, acknowledgements fenced by the attempt (including after
// another relay took an expired lease over), deleting acknowledgements,
// rescheduling with and without a refunded attempt, killing, last_error
// kept as valid UTF-8 of at most [MaxErrorLength] bytes, batches larger than
// a statement (when [Harness.Chunked] is set), stats, rows
// whose status is NULL or not 0, 1 or 2 (written by another program) left
// alone by claims and counted apart in [outbox.Stats.OtherStatus],
// concurrent claimers that never share a row, per-aggregate ordered claims
// (also under concurrency), three relays with ordering delivering what four
// writers commit meanwhile, malformed rows reported in [outbox.Claim] so they
// can be killed, a Writer round trip that keeps every field, delayed
// delivery and expiry (a delayed row not claimed before its time, holding
// back its aggregate, expired rows going dead through a relay, claims
// behind many delayed rows, and the refusal on a table without the
// columns), a table made
// by hand with only the contract columns, and hostile rows (values a writer
// in another language can put in those columns: a retry_count at an
// integer's limit, NULLs, times far in the past or future, headers that are
// not an object) that a relay must deliver, leave waiting or kill with a
// reason naming the row, while it delivers the rows around them
// ([RunHostileRows] runs that part alone). When the store also
// implements [outbox.Admin], the suite checks listing, retrying and
// discarding dead rows and archiving sent ones (into an archive table that
// follows the columns a migration adds); otherwise those subtests are
// skipped. [RunColumnMappings] checks, apart, the column mappings a store's
// constructor takes and refuses.
//
// # Raw SQL
//
// The suite plants and inspects rows with plain SQL through [Fixture.DB]:
// INSERT, UPDATE and SELECT on the contract columns (and last_error on
// migrated tables; on Postgres and MySQL also an ALTER TABLE that lets
// status be NULL; and a DROP TABLE and CREATE TABLE that make the
// ContractOnly table again with looser types), with `?` placeholders that it rewrites to `$n` for
// [Postgres]. Timestamps are bound through [Harness.Time] and read back
// through [Harness.ParseTime], so a store that keeps time in its own format
// (unix microseconds, ISO-8601 text) says how.
package storetest
