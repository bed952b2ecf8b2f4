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

// Object writes a JSON object field by field, without escaping <, > and &
// (encoding/json's default), so that text goes out as written. The zero
// value is an empty object.
type Object struct{ b bytes.Buffer }

func (o *Object) name(name string) {
	if o.b.Len() == 0 {
		o.b.WriteByte('{')
	} else {
		o.b.WriteByte(',')
	}
	o.b.WriteString(strconv.Quote(name))
	o.b.WriteByte(':')
}

// Field adds name with v encoded by encoding/json; v must always encode
// (strings, maps of strings, times).
func (o *Object) Field(name string, v any) {
	o.name(name)
	enc := json.NewEncoder(&o.b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	o.b.Truncate(o.b.Len() - 1) // Encode's newline
}

// Raw adds name with raw, valid JSON, written as is.
func (o *Object) Raw(name string, raw []byte) {
	o.name(name)
	o.b.Write(raw)
}

// Bytes closes the object and returns it.
func (o *Object) Bytes() []byte {
	if o.b.Len() == 0 {
		o.b.WriteByte('{')
	}
	o.b.WriteByte('}')
	return o.b.Bytes()
}

// Encode returns m's Envelope as JSON. A JSON payload is written as is
// (encoding/json would rewrite it, escaping <, > and &), so receivers get it
// byte for byte; the caller has checked that it is valid JSON.
func Encode(m *outbox.Message) []byte {
	var o Object
	o.Field("id", m.MessageID)
	o.Field("type", m.EventType)
	o.Field("topic", m.Destination())
	o.Field("key", m.Key())
	o.Field("aggregate", Aggregate{Type: m.AggregateType, ID: m.AggregateID})
	o.Field("content_type", m.MediaType())
	if m.JSONPayload() {
		o.Raw("payload", m.Payload)
	} else {
		o.Field("payload_base64", base64.StdEncoding.EncodeToString(m.Payload))
	}
	o.Field("headers", m.StandardHeaders())
	if !m.CreatedAt.IsZero() {
		o.Field("created_at", m.CreatedAt.UTC())
	}
	return o.Bytes()
}
