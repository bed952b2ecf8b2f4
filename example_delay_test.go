package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
)

// A message with DeliverAt waits in the table until its time; one with
// ExpiresAt is marked dead instead of published if no relay got to it in
// time. The Writer refuses an expiry that is already past.
func ExampleMessage_deliverAt() {
	ctx := context.Background()
	store, pub := outboxtest.NewMemoryStore(), outboxtest.NewPublisher()
	w := outbox.NewWriter[*outboxtest.MemoryTx](store)

	tx := store.Begin()
	err := w.Write(ctx, tx,
		&outbox.Message{AggregateType: "order", AggregateID: "1", EventType: "REMIND_UNPAID", Payload: []byte(`{}`),
			DeliverAt: time.Now().Add(30 * time.Minute)},
		&outbox.Message{AggregateType: "order", AggregateID: "2", EventType: "ORDER_PAID", Payload: []byte(`{}`),
			ExpiresAt: time.Now().Add(10 * time.Minute)},
	)
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	relay, err := outbox.NewRelay(store, pub)
	if err != nil {
		panic(err)
	}
	if _, err := relay.Step(ctx); err != nil {
		panic(err)
	}
	for _, m := range pub.Messages() {
		fmt.Println("published", m.EventType)
	}

	err = w.Write(ctx, store.Begin(), &outbox.Message{AggregateType: "order", AggregateID: "3", EventType: "E",
		Payload: []byte(`{}`), ExpiresAt: time.Now().Add(-time.Second)})
	var verr *outbox.ValidationError
	if errors.As(err, &verr) {
		fmt.Println("refused:", verr.Field)
	}
	// Output:
	// published ORDER_PAID
	// refused: ExpiresAt
}
