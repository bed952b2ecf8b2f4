package webhookpub_test

import (
	"context"
	"io"
	"log"
	"net/http"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/publisher/webhookpub"
)

func ExampleNew() {
	pub, err := webhookpub.New("https://hooks.example.com/outbox/{destination}",
		webhookpub.WithSecret("whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM="),
		webhookpub.WithConcurrency(4))
	if err != nil {
		log.Fatal(err)
	}
	errs := pub.Publish(context.Background(), []*outbox.Message{{
		MessageID:     outbox.NewMessageID(),
		AggregateType: "order",
		AggregateID:   "42",
		EventType:     "ORDER_PAID", // POSTed to .../outbox/ORDER_PAID
		Payload:       []byte(`{"order_id":42}`),
	}})
	if errs[0] != nil {
		log.Print(errs[0])
	}
}

// The receiving side: check the signature before trusting the body.
func ExampleVerify() {
	handler := func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		if err := webhookpub.Verify("whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM=", r.Header, body); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// Decode a webhookpub.Envelope, drop a repeated Idempotency-Key,
		// handle, then answer 2xx.
		w.WriteHeader(http.StatusNoContent)
	}
	http.Handle("/outbox/", http.HandlerFunc(handler))
}

// A Protobuf message POSTed as it is: the body is the payload, the
// Content-Type its content type, the outbox metadata request headers.
func ExampleWithRawBody() {
	pub, err := webhookpub.New("https://ingest.example.com/orders", webhookpub.WithRawBody(true))
	if err != nil {
		log.Fatal(err)
	}
	errs := pub.Publish(context.Background(), []*outbox.Message{{
		MessageID: outbox.NewMessageID(), AggregateType: "order", AggregateID: "42", EventType: "ORDER_PAID",
		ContentType: "application/x-protobuf", // Content-Type: application/x-protobuf
		Payload:     []byte{0x08, 0x2a},       // the body, byte for byte
	}})
	if errs[0] != nil {
		log.Print(errs[0])
	}
}
