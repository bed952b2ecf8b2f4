package mysqlstore_test

import (
	"context"
	"log"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/mysqlstore"
)

// A service marks an order paid and records the event in the same
// transaction; a relay then publishes it. (It needs a MySQL or MariaDB
// server, so it only compiles here.)
func Example() {
	ctx := context.Background()
	db, err := mysqlstore.Open("shop:secret@tcp(127.0.0.1:3306)/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := mysqlstore.New(db)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	w := outbox.NewWriter(store) // *outbox.Writer[*sql.Tx]
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, "UPDATE orders SET status = 'paid' WHERE id = ?", 42); err != nil {
		log.Fatal(err)
	}
	err = w.Write(ctx, tx, &outbox.Message{
		AggregateType: "order",
		AggregateID:   "42",
		EventType:     "ORDER_PAID",
		Payload:       []byte(`{"order":42}`),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	var pub outbox.Publisher // natspub, kafkapub, amqppub, ...
	relay, err := outbox.NewRelay(store, pub, outbox.WithOrdering(true, outbox.DeadBlocks))
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if err := relay.Run(runCtx); err != nil {
		log.Fatal(err)
	}
}

// An existing table, as many teams have one, under another name.
func ExampleWithTable() {
	db, err := mysqlstore.Open("mysql://shop:secret@db.internal/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := mysqlstore.New(db, mysqlstore.WithTable("shop.order_events"))
	if err != nil {
		log.Fatal(err)
	}
	_ = store // the store finds out on first use which optional columns the table has
}

// A relay polls a table the team created with its own column names: the
// message columns as Debezium's outbox router names them, the state
// columns with a prefix. (It needs a MySQL or MariaDB server, so it only compiles here.)
func ExampleWithColumns() {
	db, err := mysqlstore.Open("shop:secret@tcp(127.0.0.1:3306)/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := mysqlstore.New(db, mysqlstore.WithTable("outbox"), mysqlstore.WithColumns(map[string]string{
		"id": "seq", "message_id": "event_id", "aggregate_type": "aggregatetype", "aggregate_id": "aggregateid",
		"event_type": "type", "payload": "payload", "status": "ob_status", "retry_count": "ob_retries",
		"next_retry_at": "ob_due_at", "created_at": "ob_created_at", "updated_at": "ob_updated_at",
	}))
	if err != nil {
		log.Fatal(err)
	}
	// CheckTable reports a mapped column the table lacks, with the mapping
	// and the table's columns.
	if err := store.CheckTable(context.Background()); err != nil {
		log.Fatal(err)
	}
}
