package sqlcore

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

var testDialect = &Dialect{
	Store: "teststore", Quote: '"', MaxIdent: 63, PayloadPrefix: "substr(%s, 1, %d)",
	TimeLayouts: []string{"2006-01-02 15:04:05.999999999"},
}

// FuzzDecodeRow feeds arbitrary column values to the claim's decoder, as
// text ([]byte, as go-sql-driver returns it, or string, as modernc.org/sqlite
// does): it must never panic, must always keep the row id and attempt, and
// must accept only rows a publisher can send (valid UTF-8 JSON payload,
// headers an object of strings, required columns present).
func FuzzDecodeRow(f *testing.F) {
	f.Add("m-1", "order", "42", "E", []byte(`{"a":1}`), []byte(`{"k":"v"}`), "topic", false)
	f.Add("", "order", "42", "E", []byte(`null`), []byte(``), "", true)
	f.Add("m", "o", "\xff", "E", []byte("\"\xff\""), []byte(`{"k":1}`), "t", false)
	f.Add("m", "o", "1", "E", []byte(`{"a":`), []byte(`[]`), "", true)
	f.Fuzz(func(t *testing.T, msgID, aggType, aggID, evt string, payload, hdrs []byte, topic string, asBytes bool) {
		sel := append([]string{ColID, ColRetryCount}, SelectColumns(Columns{Headers: true, Topic: true, PartitionKey: true})...)
		vals := []any{int64(7), int64(3), msgID, aggType, aggID, evt, string(payload), "2024-01-02 03:04:05.123456", string(hdrs), topic, nil}
		if asBytes {
			for i, v := range vals {
				if s, ok := v.(string); ok {
					vals[i] = []byte(s)
				}
			}
		}
		m, err := testDialect.DecodeRow(sel, vals)
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
		require.Equal(t, time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC), m.CreatedAt)
		if len(hdrs) > 0 && len(m.Headers) > 0 {
			var back map[string]string
			require.NoError(t, json.Unmarshal(hdrs, &back))
			require.Equal(t, back, m.Headers)
		}
	})
}

func TestDecodeRowNumbers(t *testing.T) {
	// A JSON number stored as a number, and an integer key, read as written.
	sel := SelectColumns(Columns{})
	m, err := testDialect.DecodeRow(sel, []any{"m", "order", int64(42), "E", float64(1.5), nil})
	require.NoError(t, err)
	require.Equal(t, "42", m.AggregateID)
	require.JSONEq(t, `1.5`, string(m.Payload))
	_, err = testDialect.DecodeRow(sel, []any{"m", "order", "1", "E", true, nil})
	require.ErrorContains(t, err, "payload is a bool")
}

func TestParseTime(t *testing.T) {
	want := time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC)
	local := time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.FixedZone("x", 3600))
	for _, c := range []struct {
		name string
		d    Dialect
		v    any
		want time.Time
		ok   bool
	}{
		{"Time", Dialect{}, local, local, true},
		{"TimeWallClockUTC", Dialect{WallClockUTC: true}, local, want, true},
		{"Bytes", *testDialect, []byte("2024-01-02 03:04:05.123456"), want, true},
		{"String", *testDialect, "2024-01-02 03:04:05.123456", want, true},
		{"OtherLayout", *testDialect, "2024-01-02T03:04:05Z", time.Time{}, false},
		{"UnixSeconds", Dialect{UnixSeconds: true}, int64(1704164645), time.Unix(1704164645, 0), true},
		{"NoUnixSeconds", Dialect{}, int64(1704164645), time.Time{}, false},
		{"Null", *testDialect, nil, time.Time{}, false},
	} {
		got, ok := c.d.ParseTime(c.v)
		require.Equal(t, c.ok, ok, c.name)
		if ok {
			require.True(t, c.want.Equal(got), "%s: got %v", c.name, got)
		}
	}
}

func TestErrorText(t *testing.T) {
	require.Equal(t, "a\uFFFDb", ErrorText("a\xffb"))
	long := ErrorText(strings.Repeat("a", MaxErrorLength-1) + "é")
	require.Len(t, long, MaxErrorLength-1, "cut before a character that does not fit")
}

func TestParseTable(t *testing.T) {
	for _, c := range []struct{ raw, schema, name, err string }{
		{raw: "outbox_message", name: "outbox_message"},
		{raw: "aux.outbox", schema: "aux", name: "outbox"},
		{raw: "a.b.c", err: "more than one dot"},
		{raw: `x"; DROP TABLE y; --`, err: "is not a letter"},
		{raw: strings.Repeat("a", 64), err: "up to 62"},
	} {
		schema, name, err := testDialect.ParseTable(c.raw)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.raw)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, [2]string{c.schema, c.name}, [2]string{schema, name})
	}
	require.Equal(t, `"a""b"."c"`, testDialect.Qualified(`a"b`, "c"))
}

func TestArchiveName(t *testing.T) {
	require.Equal(t, "t_archive", ArchiveName("t", 64))
	long := strings.Repeat("x", 60)
	got := ArchiveName(long, 64)
	require.Len(t, got, 64)
	require.NotEqual(t, got, ArchiveName(long[:59]+"y", 64), "the hash tells names apart")
	require.Equal(t, long+"_archive", ArchiveName(long, 0))
}
