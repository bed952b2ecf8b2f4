package envelope_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
)

func TestEncodeRoundTrip(t *testing.T) {
	t.Parallel()
	created := time.Date(2025, 5, 6, 5, 8, 9, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		contentType string
		payload     []byte
		wantField   string // the payload field the JSON must hold
	}{
		{"DefaultJSON", "", []byte(`{"a": "<&>"}`), `"payload":{"a": "<&>"}`},
		{"JSONSuffix", "application/vnd.order+json", []byte(`[1,2]`), `"payload":[1,2]`},
		{"Protobuf", "application/x-protobuf", []byte{0x08, 0x96, 0x01, 0xff, 0x00}, `"payload_base64":"CJYB/wA="`},
		{"TextIsNotJSON", "text/plain", []byte(`123`), `"payload_base64":"MTIz"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &outbox.Message{
				MessageID: "id-1", AggregateType: "order", AggregateID: "ord-1", EventType: "ORDER_PAID",
				ContentType: tc.contentType, Payload: tc.payload, CreatedAt: created,
				Headers: map[string]string{"x-tenant": "acme"},
			}
			raw := envelope.Encode(m)
			require.Contains(t, string(raw), tc.wantField)
			var e envelope.Envelope
			require.NoError(t, json.Unmarshal(raw, &e))
			require.Equal(t, m.MediaType(), e.ContentType)
			require.Equal(t, tc.payload, e.Body())
			require.Equal(t, m.JSONPayload(), e.PayloadBase64 == nil, "exactly one payload field")
			require.Equal(t, envelope.Envelope{
				ID: "id-1", Type: "ORDER_PAID", Topic: "ORDER_PAID", Key: "ord-1",
				Aggregate:   envelope.Aggregate{Type: "order", ID: "ord-1"},
				ContentType: m.MediaType(), Payload: e.Payload, PayloadBase64: e.PayloadBase64,
				Headers: m.StandardHeaders(), CreatedAt: &created,
			}, e)
		})
	}
}
