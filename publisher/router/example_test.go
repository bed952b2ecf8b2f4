package router_test

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/publisher/router"
)

// printer is a stand-in publisher that prints where each message goes.
type printer string

func (p printer) Publish(_ context.Context, msgs []*outbox.Message) []error {
	for _, m := range msgs {
		fmt.Printf("%s <- %s %s\n", p, m.Destination(), m.EventType)
	}
	return make([]error, len(msgs))
}

func ExampleNew() {
	r, err := router.New([]router.Route{
		{EventType: "ORDER_*", Publisher: "nats", Topic: "orders.{{lower .EventType}}"},
		{AggregateType: "customer", Publisher: "kafka", Topic: "crm.{{.AggregateID}}"},
	}, map[string]outbox.Publisher{"nats": printer("nats"), "kafka": printer("kafka")})
	if err != nil {
		fmt.Println(err)
		return
	}
	errs := r.Publish(context.Background(), []*outbox.Message{
		{AggregateType: "order", AggregateID: "7", EventType: "ORDER_PAID", Payload: []byte(`{}`)},
		{AggregateType: "invoice", AggregateID: "9", EventType: "INVOICE_SENT", Payload: []byte(`{}`)},
	})
	fmt.Println(errs[1], outbox.IsPermanent(errs[1]))
	// Output:
	// nats <- orders.order_paid ORDER_PAID
	// router: no route for event type "INVOICE_SENT" (aggregate "invoice") true
}

func ExampleNew_invalid() {
	_, err := router.New([]router.Route{
		{EventType: "ORDER_[", Publisher: "nats"},
		{AggregateType: "customer", Publisher: "rabbit", Topic: "crm.{{.Nope}}"},
	}, map[string]outbox.Publisher{"nats": printer("nats")})
	fmt.Println(err)
	// Output:
	// router: new: route 1: EventType pattern "ORDER_[": syntax error in pattern
	// route 2: unknown publisher "rabbit" (have "nats")
	// route 2: topic template "crm.{{.Nope}}": template: route 2:1:6: executing "route 2" at <.Nope>: can't evaluate field Nope in type *outbox.Message
}
