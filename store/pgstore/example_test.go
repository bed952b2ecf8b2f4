package pgstore_test

import (
	"context"
	"database/sql"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver for database/sql

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgstore"
)

// A service marks an order paid and records the event in the same
// transaction; a relay publishes it once the transaction committed.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store, err := pgstore.New(pool, pgstore.WithNotify(true))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	// The service side: business rows and messages commit together.
	w := outbox.NewWriter(store) // *outbox.Writer[pgx.Tx]
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'PAID' WHERE id = $1`, "o-42"); err != nil {
			return err
		}
		return w.Write(ctx, tx, &outbox.Message{
			AggregateType: "order",
			AggregateID:   "o-42",
			EventType:     "ORDER_PAID",
			Payload:       []byte(`{"order_id":"o-42","amount":"12.50"}`),
		})
	})
	if err != nil {
		log.Fatal(err)
	}

	// The relay side, usually another process: any outbox.Publisher will do.
	relay, err := outbox.NewRelay(store, outboxtest.NewPublisher())
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil { // until ctx is cancelled
		log.Fatal(err)
	}
}

// Services on database/sql write through the same store, in transactions
// of the pgx stdlib driver.
func ExampleStore_SQLTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool)
	if err != nil {
		log.Fatal(err)
	}

	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	w := outbox.NewWriter(store.SQLTx()) // *outbox.Writer[*sql.Tx]
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := w.Write(ctx, tx, &outbox.Message{
		AggregateType: "order", AggregateID: "o-43", EventType: "ORDER_CREATED", Payload: []byte(`{}`),
	}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

// A table that is not the default one, in a schema of its own.
func ExampleWithTable() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool, pgstore.WithTable("billing.outbox_message"))
	if err != nil {
		log.Fatal(err) // a name that is not a plain identifier is refused here
	}
	_ = store
}

// A relay polls a table of the team's own whose columns have other names:
// Debezium's names for the message, its own for the rest.
func ExampleWithColumns() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store, err := pgstore.New(pool, pgstore.WithTable("orders_outbox"), pgstore.WithColumns(map[string]string{
		"id": "seq", "message_id": "eventid", "aggregate_type": "aggregatetype", "aggregate_id": "aggregateid",
		"event_type": "type", "payload": "payload", "status": "state", "retry_count": "attempts",
		"next_retry_at": "due_at", "created_at": "created", "updated_at": "changed",
	}))
	if err != nil {
		log.Fatal(err)
	}
	// No Migrate: the table is the team's. CheckTable names a mapped
	// column the table lacks, with the mapping and the table's columns.
	if err := store.CheckTable(ctx); err != nil {
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(store, outboxtest.NewPublisher())
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
