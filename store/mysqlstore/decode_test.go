package mysqlstore

import (
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeRow feeds arbitrary column values, as go-sql-driver returns
// them ([]byte for text), to the claim's decoder: it must never panic, and
// must accept only rows a publisher can send (valid UTF-8 JSON payload,
// headers an object of strings, required columns present).
func FuzzDecodeRow(f *testing.F) {
	f.Add([]byte("m-1"), []byte("order"), []byte("42"), []byte("E"), []byte(`{"a":1}`), []byte(`{"k":"v"}`), []byte("topic"))
	f.Add([]byte(""), []byte("order"), []byte("42"), []byte("E"), []byte(`null`), []byte(``), []byte(""))
	f.Add([]byte("m"), []byte("o"), []byte("\xff"), []byte("E"), []byte("\"\xff\""), []byte(`{"k":1}`), []byte("t"))
	f.Fuzz(func(t *testing.T, msgID, aggType, aggID, evt, payload, hdrs, topic []byte) {
		sel := selectColumns(tableInfo{headers: true, topic: true, partitionKey: true})
		vals := []any{msgID, aggType, aggID, evt, payload, time.Date(2024, 1, 2, 3, 4, 5, 0, time.Local), hdrs, topic, nil}
		m, err := decodeRow(sel, vals)
		require.NotNil(t, m)
		if err != nil {
			return
		}
		require.True(t, utf8.Valid(m.Payload) && json.Valid(m.Payload), "payload %q accepted", m.Payload)
		for _, s := range []string{m.MessageID, m.AggregateType, m.AggregateID, m.EventType} {
			require.NotEmpty(t, s)
			require.True(t, utf8.ValidString(s))
		}
		require.True(t, utf8.ValidString(m.Topic))
		require.Equal(t, time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), m.CreatedAt, "the wall clock is read as UTC")
	})
}
