package redispub_test

import (
	"context"
	"log"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/publisher/redispub"
)

// Streams named "outbox:<event type>", trimmed to about a million entries,
// with re-sends dropped for ten minutes.
func ExampleNew() {
	client, err := redispub.NewClient("redis://localhost:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	pub, err := redispub.New(client,
		redispub.WithStreamPrefix("outbox:"),
		redispub.WithMaxLen(1_000_000),
		redispub.WithDedup(10*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	errs := pub.Publish(context.Background(), []*outbox.Message{{
		MessageID:     outbox.NewMessageID(),
		AggregateType: "order",
		AggregateID:   "42",
		EventType:     "ORDER_PAID", // the stream: outbox:ORDER_PAID
		Payload:       []byte(`{"order_id":42}`),
	}})
	if errs[0] != nil {
		log.Print(errs[0])
	}
}
