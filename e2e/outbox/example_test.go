package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// openExampleDB opens a fresh SQLite outbox in a temporary folder.
func openExampleDB() (*sql.DB, *sqlitestore.Store, func()) {
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		panic(err)
	}
	db, err := sqlitestore.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	store, err := sqlitestore.New(db)
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(context.Background()); err != nil {
		panic(err)
	}
	if _, err := db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT NOT NULL)`); err != nil {
		panic(err)
	}
	return db, store, func() { db.Close(); os.RemoveAll(dir) }
}

// A service marks an order paid and records the event in the same
// transaction; the relay then publishes it. A rolled-back transaction leaves
// no message behind.
func Example() {
	ctx := context.Background()
	db, store, cleanup := openExampleDB()
	defer cleanup()
	writer := outbox.NewWriter[*sql.Tx](store)

	pay := func(orderID string, commit bool) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, status) VALUES (?, 'PAID')`, orderID); err != nil {
			return err
		}
		err = writer.Write(ctx, tx, &outbox.Message{
			AggregateType: "order",
			AggregateID:   orderID,
			EventType:     "ORDER_PAID",
			Payload:       []byte(`{"order_id":"` + orderID + `"}`),
		})
		if err != nil || !commit {
			return err
		}
		return tx.Commit()
	}
	_ = pay("A-1", true)
	_ = pay("A-2", false) // rolled back: no order, no message
	_ = pay("A-3", true)

	pub := outboxtest.NewPublisher() // in production: natspub, kafkapub, amqppub, ...
	relay, err := outbox.NewRelay(store, pub)
	if err != nil {
		panic(err)
	}
	sent, err := outboxtest.FlushAndWait(ctx, relay, store) // in production: relay.Run(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("sent:", sent)
	for _, m := range pub.Messages() {
		fmt.Println(m.EventType, m.AggregateID, string(m.Payload))
	}
	// Output:
	// sent: 2
	// ORDER_PAID A-1 {"order_id":"A-1"}
	// ORDER_PAID A-3 {"order_id":"A-3"}
}

// Invalid messages are refused before anything is written, so the caller's
// transaction can go on or roll back as it chooses.
func ExampleWriter_Write_validation() {
	ctx := context.Background()
	db, store, cleanup := openExampleDB()
	defer cleanup()
	writer := outbox.NewWriter[*sql.Tx](store, outbox.WithWriterMaxPayloadSize(1024))

	tx, _ := db.BeginTx(ctx, nil)
	defer tx.Rollback()
	err := writer.Write(ctx, tx, &outbox.Message{
		AggregateType: "order", AggregateID: "A-1", EventType: "ORDER_PAID",
		Payload: []byte(`{"order_id": A-1}`), // not JSON
	})
	var verr *outbox.ValidationError
	fmt.Println(errors.Is(err, outbox.ErrInvalidMessage), errors.As(err, &verr) && verr.Field == "Payload")
	fmt.Println(err)
	// Output:
	// true true
	// outbox: invalid message 0: Payload: is not valid JSON, which content type application/json requires
}

// A publisher marks what retrying cannot fix with outbox.Permanent: the relay
// marks that message dead at once, keeps the reason, and sends the others.
func ExamplePermanent() {
	ctx := context.Background()
	db, store, cleanup := openExampleDB()
	defer cleanup()
	writer := outbox.NewWriter[*sql.Tx](store)
	tx, _ := db.BeginTx(ctx, nil)
	_ = writer.Write(ctx, tx,
		&outbox.Message{AggregateType: "order", AggregateID: "A-1", EventType: "ORDER_PAID", Payload: []byte(`{}`)},
		&outbox.Message{AggregateType: "order", AggregateID: "A-2", EventType: "ORDER_SHIPPED", Payload: []byte(`{}`)},
	)
	_ = tx.Commit()

	pub := outboxtest.NewPublisher()
	pub.FailWith(func(m *outbox.Message) error {
		if m.EventType == "ORDER_SHIPPED" {
			return outbox.Permanent(errors.New("no queue is bound for ORDER_SHIPPED"))
		}
		return nil
	})
	relay, _ := outbox.NewRelay(store, pub)
	sent, _ := outboxtest.FlushAndWait(ctx, relay, store)

	var reason string
	_ = db.QueryRow(`SELECT last_error FROM outbox_message WHERE status = 2`).Scan(&reason)
	fmt.Println("sent:", sent)
	fmt.Println("dead:", reason)
	// Output:
	// sent: 1
	// dead: no queue is bound for ORDER_SHIPPED
}
