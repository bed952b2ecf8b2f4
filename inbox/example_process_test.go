package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
)

// A message delivered twice ships its order once.
func Example() {
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE shipment (order_id TEXT NOT NULL)"); err != nil {
		log.Fatal(err)
	}

	in, err := inbox.New(db, inbox.SQLite, inbox.WithConsumer("shipping"))
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	ship := func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO shipment (order_id) VALUES (?)", m.AggregateID)
		return err
	}

	msg := &outbox.Message{MessageID: "0190a5c2-7d1e-7c3a-9f00-2b1c4d5e6f70", AggregateType: "order",
		AggregateID: "order-42", EventType: "ORDER_PAID", Payload: []byte(`{"total":1999}`)}
	for range 2 { // the broker delivered it twice
		out, err := in.Process(ctx, msg, ship)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(out)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM shipment").Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("shipments:", n)
	// Output:
	// processed
	// duplicate
	// shipments: 1
}
