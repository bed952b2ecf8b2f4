package sqlitestore

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeRow feeds arbitrary column values to the claim's decoder: it
// must never panic, must always keep the row id and attempt, and must accept
// only rows a publisher can send (valid UTF-8 JSON payload, headers an
// object of strings, required columns present).
func FuzzDecodeRow(f *testing.F) {
	f.Add("m-1", "order", "42", "E", []byte(`{"a":1}`), []byte(`{"k":"v"}`), "topic", false)
	f.Add("", "order", "42", "E", []byte(`null`), []byte(``), "", true)
	f.Add("m", "o", "\xff", "E", []byte("\"\xff\""), []byte(`{"k":1}`), "t", false)
	f.Add("m", "o", "1", "E", []byte(`{"a":`), []byte(`[]`), "", true)
	f.Fuzz(func(t *testing.T, msgID, aggType, aggID, evt string, payload, hdrs []byte, topic string, payloadAsText bool) {
		sel := selectColumns(columns{headers: true, topic: true, partitionKey: true})
		var p any = payload
		if payloadAsText {
			p = string(payload)
		}
		vals := []any{int64(7), int64(3), msgID, aggType, aggID, evt, p, "2024-01-02 03:04:05.123456", string(hdrs), topic, nil}
		m, err := decodeRow(sel, vals)
		require.NotNil(t, m)
		require.EqualValues(t, 7, m.RowID)
		require.Equal(t, 3, m.Attempt)
		if err != nil {
			return
		}
		require.True(t, utf8.Valid(m.Payload) && json.Valid(m.Payload), "payload %q accepted", m.Payload)
		for _, s := range []string{m.MessageID, m.AggregateType, m.AggregateID, m.EventType} {
			require.NotEmpty(t, s)
			require.True(t, utf8.ValidString(s))
		}
		require.True(t, utf8.ValidString(m.Topic))
		require.False(t, m.CreatedAt.IsZero())
		if len(hdrs) > 0 && len(m.Headers) > 0 {
			var back map[string]string
			require.NoError(t, json.Unmarshal(hdrs, &back))
			require.Equal(t, back, m.Headers)
		}
	})
}
