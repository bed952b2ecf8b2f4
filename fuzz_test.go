package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// fuzzInserter counts the batches a Writer hands it.
type fuzzInserter struct{ calls int }

func (f *fuzzInserter) InsertTx(context.Context, struct{}, []*Message) error {
	f.calls++
	return nil
}

// badFields lists, independently of Message.validate, every field of m that
// breaks the rules Writer.Write promises to enforce.
func badFields(m *Message, maxPayload int) []string {
	var bad []string
	for _, f := range []struct {
		name     string
		v        string
		required bool
		max      int
	}{
		{"MessageID", m.MessageID, false, MaxIDLength},
		{"AggregateType", m.AggregateType, true, MaxIDLength},
		{"AggregateID", m.AggregateID, true, MaxIDLength},
		{"EventType", m.EventType, true, MaxIDLength},
		{"Topic", m.Topic, false, MaxTopicLength},
		{"PartitionKey", m.PartitionKey, false, MaxTopicLength},
	} {
		if (f.required && f.v == "") || len(f.v) > f.max || !utf8.ValidString(f.v) {
			bad = append(bad, f.name)
		}
	}
	if len(m.Payload) == 0 || (maxPayload > 0 && len(m.Payload) > maxPayload) || !json.Valid(m.Payload) {
		bad = append(bad, "Payload")
	}
	for k, v := range m.Headers {
		if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) {
			bad = append(bad, "Headers")
			break
		}
	}
	return bad
}

// FuzzMessageValidate feeds arbitrary messages to the write path's
// validation and to Writer.Write. Whatever the input: no panic; a message is
// accepted exactly when an independent check of the table contract and the
// payload limit finds nothing wrong; a refusal is a *ValidationError that
// matches ErrInvalidMessage, names the message's index and one of the fields
// that is actually wrong, and leaves the transaction untouched (nothing
// reaches the store); an accepted message without an id gets a UUIDv7. The
// seeds run as a normal test with `go test`.
func FuzzMessageValidate(f *testing.F) {
	f.Add("", "order", "42", "ORDER_PAID", "", "", []byte(`{"a":1}`), "k", "v", 0)
	f.Add("id-1", "order", "42", "ORDER_PAID", "orders.paid", "tenant", []byte(`null`), "traceparent", "00-x", 1<<20)
	f.Add("", "", "42", "E", "", "", []byte(`{}`), "", "", 0)
	f.Add("", "order", "\xff", "E", "", "", []byte(`{}`), "", "", 0)
	f.Add("", "order", "42", "E", "", "", []byte(`{"a":`), "", "", 0)
	f.Add("", "order", "42", "E", "", "", []byte("\"\xff\""), "", "", 0)
	f.Add("", "order", "42", "E", "", "", []byte(`"0123456789"`), "", "", 8)
	f.Add("", "order", "42", "E", "", "", []byte{}, "", "", 0)
	f.Add("", "order", "42", "E", "", "", []byte(`1`), "", "\xfe", 0)
	f.Add("0123456789012345678901234567890123456789012345678901234567890123456789", "o", "1", "E", "", "",
		[]byte(`[]`), "h", "v", -1)
	f.Fuzz(func(t *testing.T, id, aggType, aggID, event, topic, key string, payload []byte, hk, hv string, maxPayload int) {
		m := &Message{MessageID: id, AggregateType: aggType, AggregateID: aggID, EventType: event, Topic: topic,
			PartitionKey: key, Payload: payload}
		if hk != "" || hv != "" {
			m.Headers = map[string]string{hk: hv}
		}
		bad := badFields(m, maxPayload)

		err := m.validate(5, maxPayload, time.Now())
		if len(bad) == 0 {
			require.NoError(t, err)
		} else {
			var verr *ValidationError
			require.ErrorAs(t, err, &verr)
			require.ErrorIs(t, err, ErrInvalidMessage)
			require.Equal(t, 5, verr.Index)
			require.True(t, slices.Contains(bad, verr.Field), "reported %s, but the bad fields are %v", verr.Field, bad)
			require.NotEmpty(t, verr.Reason)
			require.True(t, utf8.ValidString(err.Error()), "the error never carries raw bytes of the message")
		}

		// The same message through the public write path, behind a valid one.
		ins := &fuzzInserter{}
		w := NewWriter[struct{}](ins, WithWriterMaxPayloadSize(maxPayload))
		ok := &Message{AggregateType: "order", AggregateID: "1", EventType: "E", Payload: []byte(`0`)} // fits any limit
		werr := w.Write(context.Background(), struct{}{}, ok, m)
		if len(bad) > 0 {
			var verr *ValidationError
			require.True(t, errors.As(werr, &verr))
			require.Equal(t, 1, verr.Index)
			require.Zero(t, ins.calls, "a refused batch never reaches the store")
			return
		}
		require.NoError(t, werr)
		require.Equal(t, 1, ins.calls)
		if id == "" {
			require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, m.MessageID)
		} else {
			require.Equal(t, id, m.MessageID)
		}
	})
}
