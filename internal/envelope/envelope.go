// Package envelope is the JSON envelope that publishers without message
// headers (webhookpub, mqttpub) wrap around a payload, written once for both.
package envelope

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"

	"github.com/outboxkit/outbox"
)

// Envelope is the JSON object that carries one message and what other
// brokers put in headers. Exactly one of Payload and PayloadBase64 is set:
// Payload for a JSON content type ([outbox.Message.JSONPayload]), byte for
// byte, PayloadBase64 (standard base64 with padding) for any other.
type Envelope struct {
	ID            string            `json:"id"`                       // the message id
	Type          string            `json:"type"`                     // the event type
	Topic         string            `json:"topic"`                    // the destination
	Key           string            `json:"key"`                      // the partition key (aggregate id unless set)
	Aggregate     Aggregate         `json:"aggregate"`                // the business entity
	ContentType   string            `json:"content_type"`             // the payload's media type
	Payload       json.RawMessage   `json:"payload,omitempty"`        // a JSON payload, byte for byte
	PayloadBase64 []byte            `json:"payload_base64,omitempty"` // any other payload
	Headers       map[string]string `json:"headers"`                  // outbox.Message.StandardHeaders
	CreatedAt     *time.Time        `json:"created_at,omitempty"`     // when written; absent when unknown
}

// Aggregate is the entity an [Envelope] is about.
type Aggregate struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// Body returns the payload's bytes, from whichever field holds them.
func (e *Envelope) Body() []byte {
	if e.PayloadBase64 != nil {
		return e.PayloadBase64
	}
	return e.Payload
}

// Encode returns m's Envelope as JSON. A JSON payload is written as is
// (encoding/json would rewrite it, escaping <, > and &), so receivers get it
// byte for byte; the caller has checked that it is valid JSON.
func Encode(m *outbox.Message) []byte {
	var b bytes.Buffer
	field := func(name string, v any) {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(name))
		b.WriteByte(':')
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		// Strings, maps of strings and times always encode.
		_ = enc.Encode(v)
		b.Truncate(b.Len() - 1) // Encode's newline
	}
	b.WriteByte('{')
	field("id", m.MessageID)
	field("type", m.EventType)
	field("topic", m.Destination())
	field("key", m.Key())
	field("aggregate", Aggregate{Type: m.AggregateType, ID: m.AggregateID})
	field("content_type", m.MediaType())
	if m.JSONPayload() {
		b.WriteString(`,"payload":`)
		b.Write(m.Payload)
	} else {
		b.WriteString(`,"payload_base64":"`)
		b.WriteString(base64.StdEncoding.EncodeToString(m.Payload))
		b.WriteByte('"')
	}
	field("headers", m.StandardHeaders())
	if !m.CreatedAt.IsZero() {
		field("created_at", m.CreatedAt.UTC())
	}
	b.WriteByte('}')
	return b.Bytes()
}
