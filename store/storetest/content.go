package storetest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// everyByte is a payload holding each byte value 0..255 once, which is not
// UTF-8 and not JSON.
func everyByte() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// contentMessages are messages of each kind of content: bytes in every value,
// bytes that are not UTF-8, text that is not JSON, JSON under a +json type
// with a parameter, and the default.
func contentMessages() []*outbox.Message {
	return []*outbox.Message{
		{AggregateType: "order", AggregateID: "1", EventType: "E", ContentType: "application/x-protobuf", Payload: everyByte()},
		{AggregateType: "order", AggregateID: "2", EventType: "E", ContentType: "application/octet-stream", Payload: []byte{0xff, 0xfe, 0x00, 0xc3, 0x28, 'n', 'u', 'l', 'l'}},
		{AggregateType: "order", AggregateID: "3", EventType: "E", ContentType: "text/plain; charset=utf-8", Payload: []byte("plain ✓ text, not JSON")},
		{AggregateType: "order", AggregateID: "4", EventType: "E", ContentType: "application/cloudevents+json; charset=utf-8", Payload: []byte(`{"specversion":"1.0"}`)},
		{AggregateType: "order", AggregateID: "5", EventType: "E", ContentType: "Application/JSON", Payload: []byte(`[1,2]`)},
		{AggregateType: "order", AggregateID: "6", EventType: "E", Payload: []byte(`null`)},
		{AggregateType: "order", AggregateID: "7", EventType: "E", ContentType: "application/x-protobuf", Payload: []byte(`null`)},
	}
}

// requireSameContent checks that got carries want's content type and payload.
func requireSameContent(t *testing.T, want, got *outbox.Message, i int) {
	t.Helper()
	require.Equal(t, want.ContentType, got.ContentType, "message %d: content type", i)
	if want.JSONPayload() {
		require.JSONEq(t, string(want.Payload), string(got.Payload), "message %d", i)
		return
	}
	require.True(t, bytes.Equal(want.Payload, got.Payload), "message %d: payload %x, want %x", i, got.Payload, want.Payload)
}

// contentRoundTrip writes a message of each kind of content and claims it
// back byte for byte, in a claim with and without a payload limit, and in
// the dead-letter list.
func (s *suite) contentRoundTrip(t *testing.T) {
	f := s.fresh(t)
	in := contentMessages()
	ids := f.write(in...)
	for i, m := range in {
		if !m.JSONPayload() {
			require.EqualValues(t, 1, f.count("id = ? AND payload_bytes IS NOT NULL", ids[i]), "message %d: bytes in payload_bytes", i)
		} else {
			require.EqualValues(t, 1, f.count("id = ? AND payload_bytes IS NULL", ids[i]), "message %d: JSON in payload", i)
		}
	}
	for _, limit := range []int{0, 1 << 10} {
		c := f.claim(outbox.ClaimParams{Limit: 10, Lease: hour, MaxPayload: limit})
		require.Empty(t, c.Malformed, "limit %d", limit)
		require.Len(t, c.Messages, len(in), "limit %d", limit)
		for i, want := range in {
			require.Equal(t, ids[i], c.Messages[i].RowID)
			requireSameContent(t, want, c.Messages[i], i)
		}
		if limit == 0 {
			f.expire(ids...)
		} else {
			f.kill("dead for the list", c.Messages...)
		}
	}
	admin, ok := f.Store.(outbox.Admin)
	if !ok {
		return
	}
	dead, err := admin.ListDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err)
	require.Len(t, dead, len(in))
	for i, want := range in {
		requireSameContent(t, want, dead[i].Message, i)
		if !want.JSONPayload() { // a JSON column may keep JSON in its own form
			require.EqualValues(t, len(want.Payload), dead[i].PayloadSize, "message %d: payload size", i)
		}
	}
}

// contentTooLarge claims a payload_bytes over the claim's limit: it comes
// back malformed with its size, not read.
func (s *suite) contentTooLarge(t *testing.T) {
	f := s.fresh(t)
	big := bytes.Repeat([]byte{0xff}, 4<<10)
	ids := f.write(&outbox.Message{AggregateType: "order", AggregateID: "1", EventType: "E", ContentType: "application/octet-stream", Payload: big},
		newMsg("order", "2", 2))
	c := f.claim(outbox.ClaimParams{Limit: 10, Lease: hour, MaxPayload: 1 << 10})
	require.Len(t, c.Messages, 1)
	require.Equal(t, ids[1], c.Messages[0].RowID)
	require.Len(t, c.Malformed, 1)
	require.Equal(t, ids[0], c.Malformed[0].Message.RowID)
	require.ErrorContains(t, c.Malformed[0].Err, fmt.Sprint(len(big)), "the size is read")
}

// contentMalformed plants rows that other writers could write wrongly: a
// content type that is not a media type, and payload_bytes that are not
// JSON under a JSON content type. Both come back malformed; text that is not
// JSON in payload under a non-JSON type is that text.
func (s *suite) contentMalformed(t *testing.T) {
	f := s.fresh(t)
	insert := "INSERT INTO {t} (message_id, aggregate_type, aggregate_id, event_type, payload, content_type, payload_bytes) VALUES (?, 'order', ?, 'E', ?, ?, ?)"
	f.exec(insert, "bad-type", "1", "null", "not a media type", []byte{1, 2})
	bad1 := f.maxID()
	f.exec(insert, "bad-json", "2", "null", "application/json", []byte{0xff})
	bad2 := f.maxID()
	f.exec(insert, "bare", "3", `"bare"`, "text/plain", nil)
	good := f.maxID()
	c := f.claimN(10)
	require.Len(t, c.Malformed, 2)
	require.Equal(t, bad1, c.Malformed[0].Message.RowID)
	require.ErrorContains(t, c.Malformed[0].Err, "content_type")
	require.Equal(t, bad2, c.Malformed[1].Message.RowID)
	require.ErrorContains(t, c.Malformed[1].Err, "JSON")
	require.Len(t, c.Messages, 1)
	require.Equal(t, good, c.Messages[0].RowID)
	require.Equal(t, "text/plain", c.Messages[0].ContentType)
	require.Equal(t, `"bare"`, string(c.Messages[0].Payload))
}

// contentOnOldTable writes to a table without content_type and
// payload_bytes: JSON messages under the default type go in as before, any
// other content is refused by Write, saying to migrate, and nothing is
// written.
func (s *suite) contentOnOldTable(t *testing.T) {
	f := s.contract(t)
	f.write(newMsg("order", "1", 1), &outbox.Message{AggregateType: "order", AggregateID: "2", EventType: "E",
		ContentType: outbox.ContentTypeJSON, Payload: []byte(`{}`)})
	for _, m := range contentMessages() {
		if m.ContentType == "" {
			continue
		}
		err := f.Write(t.Context(), newMsg("order", "3", 3), m)
		require.Error(t, err, "content type %s", m.ContentType)
		require.True(t, strings.Contains(err.Error(), "outbox migrate"), "the error says to migrate: %v", err)
	}
	require.EqualValues(t, 2, f.count(""), "the refused writes left nothing")
}
