package pgcdc_test

import (
	"context"
	"log"
	"os"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgcdc"
	"github.com/outboxkit/outbox/store/pgstore"
)

// A relay reads the table of Debezium's outbox event router as it is:
// a log-only table (no state columns), whose dead messages go to a table
// of the contract's layout.
func ExampleWithColumns() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL")
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	dead, err := pgstore.New(pool, pgstore.WithTable("outbox_dead"))
	if err != nil {
		log.Fatal(err)
	}
	if err := dead.Migrate(ctx); err != nil { // the dead table, in the contract's layout
		log.Fatal(err)
	}
	src, err := pgcdc.New(pool, dsn, pgcdc.WithTable("outbox"), pgcdc.WithDeadTable("outbox_dead"),
		pgcdc.WithColumns(map[string]string{"message_id": "id", "aggregate_type": "aggregatetype",
			"aggregate_id": "aggregateid", "event_type": "type", "payload": "payload"}))
	if err != nil {
		log.Fatal(err)
	}
	if err := src.CheckTable(ctx); err != nil { // names a mapped column the table lacks, with its columns
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(src, outboxtest.NewPublisher()) // a broker's publisher in production
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = src.Run(ctx) }) // reads the stream beside the relay
	_ = relay.Run(ctx)
	wg.Wait()
}
