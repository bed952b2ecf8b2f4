package termsafe

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"Plain", "ORDER_CREATED", "ORDER_CREATED"},
		{"UTF8Kept", "Bestellung für Zoë, 注文 ✓ \\ \"q\"", "Bestellung für Zoë, 注文 ✓ \\ \"q\""},
		{"Empty", "", ""},
		{"CSI", "a\x1b[31mred", `a\x1b[31mred`},
		{"OSC8Hyperlink", "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x07", `\x1b]8;;http://evil.example\x1b\click\x1b]8;;\a`},
		{"BEL", "ding\a", `ding\a`},
		{"CarriageReturn", "ok\rFAKE", `ok\rFAKE`},
		{"NewlineAndTab", "a\nb\tc", `a\nb\tc`},
		{"DEL", "x\x7fy", `x\x7fy`},
		{"C1CSIRune", "x\u009b31my", `x\u009b31my`},
		{"C1CSIByte", "x\x9b31my", `x\x9b31my`},
		{"InvalidUTF8", "\xff\xfe", `\xff\xfe`},
		{"BidiOverride", "txt.\u202egpj.exe", `txt.\u202egpj.exe`},
		{"BidiIsolate", "\u2066a\u2069", `\u2066a\u2069`},
		{"ZeroWidth", "a\u200bb", `a\u200bb`},
		{"LineSeparator", "a\u2028b", `a\u2028b`},
		{"TagRune", "a\U000e0041", `a\U000e0041`},
		{"ReplacementCharKept", "a\ufffdb", "a\ufffdb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, String(tc.in))
		})
	}
}

func TestBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"Plain", `{"a":"b"}`, `{"a":"b"}`},
		{"LinesAndTabsKept", "{\n\t\"a\": 1\n}\n", "{\n\t\"a\": 1\n}\n"},
		{"UTF8Kept", `{"a":"für 注文"}`, `{"a":"für 注文"}`},
		{"ESC", "a\x1b[31m", `a\u001b[31m`},
		{"CarriageReturn", "a\rb", `a\u000db`},
		{"DEL", "a\x7f", `a\u007f`},
		{"C1", "a\u009b31m", `a\u009b31m`},
		{"Bidi", "a\u202eb", `a\u202eb`},
		{"AboveBMP", "a\U000e0041", `a\udb40\udc41`},
		{"InvalidUTF8", "a\x9bb", `a\ufffdb`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, string(Bytes([]byte(tc.in))))
		})
	}
}

// TestBytesKeepsJSON checks that what encoding/json lets through is escaped
// into JSON that decodes to the same value.
func TestBytesKeepsJSON(t *testing.T) {
	t.Parallel()
	v := map[string]string{"k\u202e": "\x1b]8;;http://x\x07\u009b\x7f\u2066\U000e0041 für"}
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	safe := Bytes(raw)
	require.Equal(t, -1, firstUnsafe(string(safe), true), "%q", safe)
	var got map[string]string
	require.NoError(t, json.Unmarshal(safe, &got))
	require.Equal(t, v, got)
}

func TestWriter(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	n, err := NewWriter(&out).Write([]byte("a\u009bb\n"))
	require.NoError(t, err)
	require.Equal(t, len("a\u009bb\n"), n, "the length of what was asked, not of what was written")
	require.Equal(t, "a\\u009bb\n", out.String())

	_, err = NewWriter(failWriter{}).Write([]byte("x"))
	require.ErrorIs(t, err, errFail)
}

var errFail = errors.New("fail")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errFail }
