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

// Draining a large backlog fastest: each batch is locked in a transaction
// held open while it is published, and settled in it, so every row is
// written once. The pool needs a connection per batch in flight (4 here)
// besides the service's own; `outbox bench --held-claims --ordering=false --delete-sent`
// measures it on your own database and broker.
func ExampleWithHeldClaims() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 4 + 2 // the batches in flight, and room for the rest
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store, err := pgstore.New(pool, pgstore.WithHeldClaims(true), pgstore.WithNotify(true))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(store, outboxtest.NewPublisher(),
		outbox.WithBatchSize(1000),
		outbox.WithMaxInFlight(4),                     // the publish timeout (3 s by default) bounds how long each holds its transaction
		outbox.WithOrdering(false, outbox.DeadBlocks), // ordered claims are leased, never held
		outbox.WithDeleteSent(true))
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
