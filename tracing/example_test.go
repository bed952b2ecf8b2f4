package tracing_test

import (
	"context"
	"log"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/sqlitestore"
	"github.com/outboxkit/outbox/tracing"
)

// Traces from the writing request to the broker, exported over OTLP/HTTP to a
// collector (it needs one, so it has no output).
func Example() {
	ctx := context.Background()
	tp, shutdown, err := tracing.Setup(ctx, tracing.Config{
		Exporter:    tracing.ExporterOTLP,
		Endpoint:    "http://otel-collector:4318",
		ServiceName: "orders-relay",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer shutdown(context.WithoutCancel(ctx)) // flushes the spans still buffered

	db, err := sqlitestore.Open("outbox.db")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlitestore.New(db)
	if err != nil {
		log.Fatal(err)
	}
	pub := outboxtest.NewPublisher() // natspub, kafkapub, ... in production
	relay, err := outbox.NewRelay(store, tracing.WrapPublisher(pub, tp, tracing.WithSystem("nats")))
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
