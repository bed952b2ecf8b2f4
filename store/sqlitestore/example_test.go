package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// A service marks an order paid and records the event in the same
// transaction; a relay then publishes it.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	db, err := sqlitestore.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	store, err := sqlitestore.New(db)
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT)"); err != nil {
		panic(err)
	}

	// The business change and its message commit together. Store.Tx queues
	// the transaction with the relay's own writes (SQLite lets one writer
	// in at a time).
	w := outbox.NewWriter(store)
	err = store.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, status) VALUES ('o-42', 'paid')"); err != nil {
			return err
		}
		return w.Write(ctx, tx, &outbox.Message{
			AggregateType: "order",
			AggregateID:   "o-42",
			EventType:     "ORDER_PAID",
			Payload:       []byte(`{"order":"o-42","amount":12.5}`),
		})
	})
	if err != nil {
		panic(err)
	}

	// A relay publishes what committed.
	pub := outboxtest.NewPublisher()
	relay, err := outbox.NewRelay(store, pub)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := outboxtest.FlushAndWait(ctx, relay, store); err != nil {
		panic(err)
	}
	for _, m := range pub.Messages() {
		fmt.Println(m.EventType, m.AggregateID, string(m.Payload))
	}
	st, err := store.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("pending:", st.Pending, "sent in the last minute:", st.SentLastMinute)
	// Output:
	// ORDER_PAID o-42 {"order":"o-42","amount":12.5}
	// pending: 0 sent in the last minute: 1
}

// A store on a table of another name, checked and quoted by New.
func ExampleWithTable() {
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlitestore.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()

	if _, err := sqlitestore.New(db, sqlitestore.WithTable("events; DROP TABLE orders")); err != nil {
		fmt.Println("rejected")
	}
	store, err := sqlitestore.New(db, sqlitestore.WithTable("billing_outbox"))
	if err != nil {
		panic(err)
	}
	fmt.Println(store.Table())
	// Output:
	// rejected
	// billing_outbox
}

// A relay polls a table the team created with its own column names: the
// message columns as Debezium's outbox router names them, the state
// columns with a prefix. (It needs a database file, so it only compiles here.)
func ExampleWithColumns() {
	db, err := sqlitestore.Open("shop.db")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	store, err := sqlitestore.New(db, sqlitestore.WithTable("outbox"), sqlitestore.WithColumns(map[string]string{
		"id": "seq", "message_id": "event_id", "aggregate_type": "aggregatetype", "aggregate_id": "aggregateid",
		"event_type": "type", "payload": "payload", "status": "ob_status", "retry_count": "ob_retries",
		"next_retry_at": "ob_due_at", "created_at": "ob_created_at", "updated_at": "ob_updated_at",
	}))
	if err != nil {
		panic(err)
	}
	// CheckTable reports a mapped column the table lacks, with the mapping
	// and the table's columns.
	if err := store.CheckTable(context.Background()); err != nil {
		panic(err)
	}
}
