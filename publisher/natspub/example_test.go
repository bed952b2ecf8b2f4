package natspub_test

import (
	"context"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/publisher/natspub"
)

// Publish a batch to JetStream: every message gets its own result.
func ExamplePublisher_Publish() {
	nc, err := nats.Connect(nats.DefaultURL, nats.MaxReconnects(-1), nats.ReconnectWait(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := natspub.EnsureStream(ctx, js, "OUTBOX", []string{"outbox.>"}, 0); err != nil {
		log.Fatal(err)
	}
	pub, err := natspub.New(js, natspub.WithSubjectPrefix("outbox."))
	if err != nil {
		log.Fatal(err)
	}
	errs := pub.Publish(ctx, []*outbox.Message{{
		MessageID:     outbox.NewMessageID(),
		AggregateType: "order",
		AggregateID:   "42",
		EventType:     "ORDER_PAID", // subject outbox.ORDER_PAID
		Payload:       []byte(`{"order":42}`),
	}})
	for _, err := range errs {
		switch {
		case err == nil: // stored by the stream
		case outbox.IsPermanent(err): // refused for good: dead-letter it
		case outbox.IsUnavailable(err): // NATS is down: try later
		}
	}
}
