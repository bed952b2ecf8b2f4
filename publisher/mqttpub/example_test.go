package mqttpub_test

import (
	"context"
	"log"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/publisher/mqttpub"
)

func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := mqttpub.Connect(ctx, "mqtt://localhost:1883")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(250)

	pub, err := mqttpub.New(client, mqttpub.WithTopicPrefix("outbox/"))
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	errs := pub.Publish(ctx, []*outbox.Message{{
		MessageID:     outbox.NewMessageID(),
		AggregateType: "order",
		AggregateID:   "42",
		EventType:     "ORDER_PAID", // the topic: outbox/ORDER_PAID
		Payload:       []byte(`{"order_id":42}`),
	}})
	if errs[0] != nil {
		log.Print(errs[0])
	}
}

// The payload alone, for consumers that read it as it is. MQTT 3.1.1
// carries no content type, id or trace context beside it.
func ExampleWithRawPayload() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := mqttpub.Connect(ctx, "mqtt://localhost:1883")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(250)

	pub, err := mqttpub.New(client, mqttpub.WithRawPayload(true))
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	errs := pub.Publish(ctx, []*outbox.Message{{
		MessageID: outbox.NewMessageID(), AggregateType: "sensor", AggregateID: "s-7", EventType: "READING",
		ContentType: "application/x-protobuf", Payload: []byte{0x08, 0x2a},
	}})
	if errs[0] != nil {
		log.Print(errs[0])
	}
}
