package kafkapub_test

import (
	"context"
	"log"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/publisher/kafkapub"
)

// The daemon's way: a client from a URL, a Publisher around it.
func ExampleNew() {
	client, err := kafkapub.NewClient("kafka://broker1:9092,broker2:9092?sasl=scram-sha-512&tls=true")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close() // the Publisher never closes it

	pub, err := kafkapub.New(client, kafkapub.WithTopicPrefix("outbox."))
	if err != nil {
		log.Fatal(err)
	}
	errs := pub.Publish(context.Background(), []*outbox.Message{{
		MessageID:     outbox.NewMessageID(),
		AggregateType: "order",
		AggregateID:   "42",
		EventType:     "ORDER_PAID", // the topic: outbox.ORDER_PAID
		Payload:       []byte(`{"order_id":42}`),
	}})
	if errs[0] != nil {
		log.Print(errs[0])
	}
}
