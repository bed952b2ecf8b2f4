package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// roundTripMessages are written and claimed back by WriterRoundTrip and
// ContractOnlyTable; the first two fill every field.
func roundTripMessages() []*outbox.Message {
	return []*outbox.Message{
		{
			MessageID:     "01890a5d-ac96-774b-bcce-b302099a8057",
			AggregateType: "order",
			AggregateID:   "42",
			EventType:     "ORDER_PAID",
			Topic:         "orders.paid.v2",
			PartitionKey:  "customer-7",
			Payload:       json.RawMessage(`{"amount": 12.5, "items": ["a", "b"], "note": "héllo ✓ \"q\" \\ ", "nested": {"k": null, "n": -1e-3}}`),
			Headers: map[string]string{
				outbox.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"x-tenant":               "acme",
				"x-unicode":              "ü → ✓",
				"x-empty":                "",
			},
		},
		{
			AggregateType: "payment",
			AggregateID:   "p-9",
			EventType:     "PAYMENT_CAPTURED",
			Topic:         "payments",
			PartitionKey:  "tenant-1",
			Payload:       json.RawMessage(`"just a string"`),
			Headers:       map[string]string{"k": "v"},
		},
		{AggregateType: "order", AggregateID: "43", EventType: "ORDER_CREATED", Payload: json.RawMessage(`[]`)},
		{AggregateType: "order", AggregateID: "44", EventType: "ORDER_CREATED", Payload: json.RawMessage(`null`)},
	}
}

func (s *suite) writerRoundTrip(t *testing.T) {
	f := s.fresh(t)
	in := roundTripMessages()
	before := time.Now()
	ids := f.write(in...)
	after := time.Now()

	c := f.claimN(10)
	require.Empty(t, c.Malformed)
	require.Len(t, c.Messages, len(in))
	for i, want := range in {
		got := c.Messages[i]
		require.Equal(t, ids[i], got.RowID, "message %d: rows get ids in write order", i)
		require.NotEmpty(t, want.MessageID, "the Writer fills an empty MessageID")
		require.Equal(t, want.MessageID, got.MessageID, "message %d", i)
		require.Equal(t, want.AggregateType, got.AggregateType, "message %d", i)
		require.Equal(t, want.AggregateID, got.AggregateID, "message %d", i)
		require.Equal(t, want.EventType, got.EventType, "message %d", i)
		require.Equal(t, want.Topic, got.Topic, "message %d", i)
		require.Equal(t, want.PartitionKey, got.PartitionKey, "message %d", i)
		require.JSONEq(t, string(want.Payload), string(got.Payload), "message %d", i)
		if len(want.Headers) == 0 {
			require.Empty(t, got.Headers, "message %d", i)
		} else {
			require.Equal(t, want.Headers, got.Headers, "message %d", i)
		}
		near(t, before.Add(after.Sub(before)/2), got.CreatedAt, after.Sub(before)/2+5*time.Second, "CreatedAt")
		require.Equal(t, 1, got.Attempt)
	}
}

func (s *suite) duplicateMessageID(t *testing.T) {
	f := s.fresh(t)
	f.write(&outbox.Message{MessageID: "dup-1", AggregateType: "order", AggregateID: "1", EventType: "E", Payload: []byte(`{}`)})
	err := f.Write(t.Context(),
		&outbox.Message{MessageID: "fresh-1", AggregateType: "order", AggregateID: "2", EventType: "E", Payload: []byte(`{}`)},
		&outbox.Message{MessageID: "dup-1", AggregateType: "order", AggregateID: "3", EventType: "E", Payload: []byte(`{}`)},
	)
	require.ErrorIs(t, err, outbox.ErrDuplicate, "a message id is unique")
	require.EqualValues(t, 1, f.count(""), "the failed write left nothing behind")
}
