package amqppub_test

import (
	"context"
	"log"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/publisher/amqppub"
)

// A Publisher that declares its topic exchange on every (re)connection and
// routes by event type.
func ExampleDial() {
	pub, err := amqppub.Dial("amqp://guest:guest@localhost:5672/",
		amqppub.WithExchange("outbox"),
		amqppub.WithSetup(func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare("outbox", amqp.ExchangeTopic, true, false, false, false, nil)
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	errs := pub.Publish(context.Background(), []*outbox.Message{{
		MessageID:     outbox.NewMessageID(),
		AggregateType: "order",
		AggregateID:   "42",
		EventType:     "ORDER_PAID", // the routing key
		Payload:       []byte(`{"order_id":42}`),
	}})
	if errs[0] != nil {
		log.Print(errs[0]) // e.g. unroutable when no queue is bound to ORDER_PAID
	}
}
