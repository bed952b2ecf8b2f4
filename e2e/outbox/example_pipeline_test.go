package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
)

// A relay that keeps up to three batches at the broker at once, and looks
// for new rows 5 ms after a claim that found some (adaptive polling), backing
// off to its poll interval while the table stays empty.
func ExampleWithMaxInFlight() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, store, cleanup := openExampleDB()
	defer cleanup()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	msgs := make([]*outbox.Message, 250)
	for i := range msgs {
		msgs[i] = &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprint(i), EventType: "ORDER_PAID",
			Payload: []byte(`{}`)}
	}
	if err := outbox.NewWriter[*sql.Tx](store).Write(ctx, tx, msgs...); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	pub := outboxtest.NewPublisher()
	relay, err := outbox.NewRelay(store, pub,
		outbox.WithBatchSize(100),
		outbox.WithMaxInFlight(3),
		outbox.WithMinPollInterval(5*time.Millisecond),
		outbox.WithPollInterval(time.Second))
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	for pub.Count() < len(msgs) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel() // Run finishes the batches in flight, then returns
	if err := <-done; err != nil {
		panic(err)
	}
	st, err := store.Stats(context.Background())
	if err != nil {
		panic(err)
	}
	fmt.Println("published:", pub.Count(), "pending:", st.Pending)
	// Output: published: 250 pending: 0
}
