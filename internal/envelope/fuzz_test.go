package envelope_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
)

// FuzzEncode checks that every message the Writer accepts encodes to an
// envelope that is JSON and gives its payload and header back.
func FuzzEncode(f *testing.F) {
	f.Add([]byte(`{"a":"<&>"}`), true, "x-note", "caf\u00e9")
	f.Add([]byte{0x00, 0xff}, false, "k", "\u2028")
	f.Fuzz(func(t *testing.T, payload []byte, isJSON bool, hk, hv string) {
		ct := "application/x-protobuf"
		if isJSON {
			ct = ""
		}
		if len(payload) == 0 || isJSON && !json.Valid(payload) || hk == "" || !utf8.ValidString(hk) || !utf8.ValidString(hv) {
			return // the Writer refuses these
		}
		m := &outbox.Message{MessageID: "id", AggregateType: "t", AggregateID: "a", EventType: "E",
			ContentType: ct, Payload: payload, Headers: map[string]string{hk: hv}}
		raw := envelope.Encode(m)
		var e envelope.Envelope
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("envelope is not JSON: %v\n%s", err, raw)
		}
		want := payload
		if isJSON {
			want = bytes.TrimSpace(payload) // json.RawMessage drops the whitespace around a value
		}
		if !bytes.Equal(e.Body(), want) {
			t.Fatalf("payload %q came back as %q", want, e.Body())
		}
		if got := e.Headers[hk]; got != m.StandardHeaders()[hk] {
			t.Fatalf("header %q: %q, want %q", hk, got, m.StandardHeaders()[hk])
		}
	})
}
