package pgstore_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgstore"
)

// The settings for a busy table: batch leases and asynchronous commits for
// the relay's statements, notifications coalesced on the write side, and a
// relay that claims large batches and keeps several at the broker at once.
// `outbox bench --batch-lease --async-commit` measures them on your own
// database and broker.
func ExampleWithBatchLease() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store, err := pgstore.New(pool,
		pgstore.WithBatchLease(true),                   // one lease row per batch, not an UPDATE per row
		pgstore.WithAsyncCommit(true),                  // the relay's commits do not wait for the disk
		pgstore.WithNotify(true),                       // wake the relay when rows commit ...
		pgstore.WithNotifyInterval(5*time.Millisecond), // ... from at most one transaction per 5 ms
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil { // creates the lease table too
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(store, outboxtest.NewPublisher(),
		outbox.WithBatchSize(1000),
		outbox.WithMaxInFlight(4),
		outbox.WithDeleteSent(true))
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
