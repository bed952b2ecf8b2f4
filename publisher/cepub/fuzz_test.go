package cepub_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/publisher/cepub"
)

// FuzzStructured checks that every payload a message can hold becomes a
// structured event that is valid JSON and gives the payload back.
func FuzzStructured(f *testing.F) {
	f.Add([]byte(`{"a":"<&>"}`), true, "ord-1")
	f.Add([]byte{0x00, 0xff, 0xfe}, false, "ord-\u2603")
	f.Add([]byte(`"\u2028"`), true, `a"b\c`)
	f.Fuzz(func(t *testing.T, payload []byte, isJSON bool, subject string) {
		ct := "application/octet-stream"
		if isJSON {
			ct = ""
		}
		m := &outbox.Message{MessageID: "id", AggregateType: "t", AggregateID: subject, EventType: "E",
			ContentType: ct, Payload: payload}
		if isJSON && !json.Valid(payload) || !utf8.ValidString(subject) {
			return // the Writer refuses it; cepub's own test covers the refusal
		}
		p, err := cepub.New(outboxtest.NewPublisher(), cepub.None, "/s")
		if err != nil {
			t.Fatal(err)
		}
		e, err := p.Event(m)
		if err != nil {
			t.Fatal(err)
		}
		var ev struct {
			Subject    string          `json:"subject"`
			Data       json.RawMessage `json:"data"`
			DataBase64 string          `json:"data_base64"`
		}
		if err := json.Unmarshal(e.Payload, &ev); err != nil {
			t.Fatalf("structured event is not JSON: %v\n%s", err, e.Payload)
		}
		if subject != "" && ev.Subject != subject {
			t.Fatalf("subject %q came back as %q", subject, ev.Subject)
		}
		if isJSON {
			// json.RawMessage drops the whitespace around a value.
			if string(ev.Data) != string(bytes.TrimSpace(payload)) {
				t.Fatalf("data %q, want %q", ev.Data, payload)
			}
			return
		}
		got, err := base64.StdEncoding.DecodeString(ev.DataBase64)
		if err != nil || string(got) != string(payload) {
			t.Fatalf("data_base64 gave %q (%v), want %q", got, err, payload)
		}
	})
}
