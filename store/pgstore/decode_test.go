package pgstore

import (
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// FuzzDecodeRow feeds arbitrary column values, as pgx scans them into a
// claimedRow (text, with a NULL flag per column), to the claim's decoder: it
// must never panic, must always keep the row id and attempt, and must accept
// only rows a publisher can send (valid UTF-8 JSON payload, headers an
// object of strings, required columns present and not empty). A UTF8
// database returns only valid UTF-8, but a SQL_ASCII one returns any bytes,
// and a team's own table may hold payloads and headers as text, not jsonb.
// null has one bit per column, in claimedRow order from message_id, that
// makes the column NULL.
func FuzzDecodeRow(f *testing.F) {
	f.Add(int64(7), int32(1), "m-1", "order", "42", "E", `{"a":1}`, `{"k":"v"}`, "topic", "key", uint16(0))
	f.Add(int64(1), int32(3), "", "order", "42", "E", `null`, ``, "", "", uint16(0))
	f.Add(int64(2), int32(1), "m", "o", "\xff", "E", "\"\xff\"", `{"k":1}`, "t", "", uint16(0))
	f.Add(int64(3), int32(2), "m", "o", "1", "E", `{"a":`, `[]`, "", "", uint16(0))
	f.Add(int64(4), int32(1), "m", "o", "1", "E", `{}`, `{"k":"v"}`, "", "", uint16(0b1_1111_1111))
	f.Add(int64(-1), int32(-5), "m", "o", "1", "E", `[1,2]`, `null`, "\xc3", "", uint16(0b10_0000))
	f.Fuzz(func(t *testing.T, id int64, attempt int32, msgID, aggType, aggID, evt, payload, hdrs, topic, key string, null uint16) {
		// pgx scans NULL as the zero value, Valid false.
		text := func(bit int, s string) pgtype.Text {
			if null&(1<<bit) != 0 {
				return pgtype.Text{}
			}
			return pgtype.Text{String: s, Valid: true}
		}
		created := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
		r := claimedRow{
			id: id, attempt: attempt,
			messageID: text(0, msgID), aggType: text(1, aggType), aggID: text(2, aggID), eventType: text(3, evt),
			payload: text(4, payload), headers: text(6, hdrs), topic: text(7, topic), partitionKey: text(8, key),
		}
		if null&(1<<5) == 0 {
			r.createdAt = pgtype.Timestamptz{Time: created, Valid: true}
		}
		m, err := r.message()
		require.NotNil(t, m)
		require.Equal(t, id, m.RowID)
		require.Equal(t, int(attempt), m.Attempt)
		if err != nil {
			require.Contains(t, err.Error(), "pgstore: row ")
			return
		}
		require.True(t, utf8.Valid(m.Payload) && json.Valid(m.Payload), "payload %q accepted", m.Payload)
		for _, s := range []string{m.MessageID, m.AggregateType, m.AggregateID, m.EventType} {
			require.NotEmpty(t, s)
			require.True(t, utf8.ValidString(s), "%q accepted", s)
		}
		require.True(t, utf8.ValidString(m.Topic), "topic %q accepted", m.Topic)
		require.True(t, utf8.ValidString(m.PartitionKey), "partition key %q accepted", m.PartitionKey)
		for k, v := range m.Headers {
			require.True(t, utf8.ValidString(k) && utf8.ValidString(v), "header %q: %q accepted", k, v)
		}
		if r.createdAt.Valid {
			require.Equal(t, created, m.CreatedAt)
		}
		if r.headers.Valid && len(m.Headers) > 0 {
			var back map[string]string
			require.NoError(t, json.Unmarshal([]byte(hdrs), &back))
			require.Equal(t, back, m.Headers)
		}
	})
}
