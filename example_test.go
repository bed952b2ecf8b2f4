package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
)

// A service records an event in the same transaction as its business change;
// the relay then publishes it. A rolled-back transaction leaves no message.
// The in-memory store stands in for a database here; a service uses
// store/pgstore, store/mysqlstore or store/sqlitestore, whose Writer takes
// the service's own transaction (pgx.Tx, *sql.Tx).
func Example() {
	ctx := context.Background()
	store := outboxtest.NewMemoryStore()
	writer := outbox.NewWriter[*outboxtest.MemoryTx](store)

	pay := func(orderID string, commit bool) error {
		tx := store.Begin()
		// ... the business change goes in the same transaction ...
		err := writer.Write(ctx, tx, &outbox.Message{
			AggregateType: "order", AggregateID: orderID, EventType: "ORDER_PAID",
			Payload: []byte(`{"order":"` + orderID + `"}`),
		})
		if err != nil || !commit {
			return errors.Join(err, tx.Rollback())
		}
		return tx.Commit()
	}
	_ = pay("o-1", true)
	_ = pay("o-2", false) // rolled back: never published
	_ = pay("o-3", true)

	pub := outboxtest.NewPublisher()
	relay, err := outbox.NewRelay(store, pub)
	if err != nil {
		panic(err)
	}
	sent, err := outboxtest.FlushAndWait(ctx, relay, store)
	fmt.Println(sent, err)
	for _, m := range pub.Messages() {
		fmt.Println(m.EventType, m.AggregateID, string(m.Payload))
	}
	// Output:
	// 2 <nil>
	// ORDER_PAID o-1 {"order":"o-1"}
	// ORDER_PAID o-3 {"order":"o-3"}
}

// A message the broker refuses for good goes dead with the reason, and the
// others are published: one poison message never blocks the rest.
func ExampleNewRelay_deadLetter() {
	ctx := context.Background()
	store := outboxtest.NewMemoryStore()
	writer := outbox.NewWriter[*outboxtest.MemoryTx](store)
	tx := store.Begin()
	for _, id := range []string{"a-1", "a-2", "a-3"} {
		_ = writer.Write(ctx, tx, &outbox.Message{
			AggregateType: "account", AggregateID: id, EventType: "ACCOUNT_OPENED", Payload: []byte(`{}`),
		})
	}
	_ = tx.Commit()

	pub := outboxtest.NewPublisher()
	pub.FailWith(func(m *outbox.Message) error {
		if m.AggregateID == "a-2" {
			return errors.New("broker: message refused")
		}
		return nil
	})
	relay, _ := outbox.NewRelay(store, pub,
		outbox.WithMaxAttempts(3), outbox.WithBackoff(time.Millisecond, time.Millisecond))
	sent, _ := outboxtest.FlushAndWait(ctx, relay, store)
	fmt.Println("sent", sent)
	for _, d := range store.Dead() {
		fmt.Println("dead", d.Message.AggregateID, "after", d.Attempts, "attempts")
	}
	// Output:
	// sent 2
	// dead a-2 after 3 attempts
}
