package cepub_test

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/publisher/cepub"
)

func Example() {
	inner := outboxtest.NewPublisher() // in production: kafkapub, natspub, webhookpub (WithRawBody), ...
	p, err := cepub.New(inner, cepub.Kafka, "/outbox/outbox_message", cepub.WithMode(cepub.Structured))
	if err != nil {
		panic(err)
	}
	m := &outbox.Message{
		MessageID: "0191e7a4-0000-7000-8000-000000000001", AggregateType: "order", AggregateID: "42",
		EventType: "ORDER_PAID", Payload: []byte(`{"order_id":42}`),
		CreatedAt: time.Date(2025, 5, 6, 5, 8, 9, 0, time.UTC),
	}
	if err := p.Publish(context.Background(), []*outbox.Message{m})[0]; err != nil {
		panic(err)
	}
	sent := inner.Messages()[0]
	fmt.Println(sent.ContentType)
	fmt.Println(string(sent.Payload))
	// Output:
	// application/cloudevents+json
	// {"specversion":"1.0","id":"0191e7a4-0000-7000-8000-000000000001","source":"/outbox/outbox_message","type":"ORDER_PAID","subject":"42","time":"2025-05-06T05:08:09Z","aggregatetype":"order","partitionkey":"42","datacontenttype":"application/json","data":{"order_id":42}}
}
