// Package termsafe escapes the runes a terminal would take as commands, so
// that a value from a database row, a broker, an error or a config file can
// be printed without recolouring the operator's screen, planting an OSC 8
// hyperlink, ringing the bell, rewriting the line (\r) or reordering it
// (bidi overrides such as U+202E).
//
// A rune is unsafe when [strconv.IsPrint] says it is not printable: C0
// controls (ESC, BEL, \r, \n, \t ...), DEL, C1 controls (U+0080–U+009F,
// U+009B being the one-rune CSI), format runes (bidi overrides and
// isolates, zero-width joiners), line and paragraph separators, and
// unassigned or private-use code points. Every other rune, ordinary UTF-8
// text included, is kept as it is, and so is the backslash.
//
// [String] is for one value in a line of text; [Bytes] and [NewWriter] are
// for whole outputs (JSON documents, log records) and keep their newlines
// and tabs.
package termsafe

import (
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// String returns s with every unsafe rune escaped as Go writes it in a
// quoted string (\x1b, \a, \n, \u009b, \u202e), and every byte that is not
// UTF-8 as \xNN. A safe s is returned unchanged. String is safe for
// concurrent use.
func String(s string) string {
	i := firstUnsafe(s, false)
	if i < 0 {
		return s
	}
	buf := make([]byte, 0, len(s)+16)
	buf = append(buf, s[:i]...)
	for s = s[i:]; s != ""; {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			buf = append(buf, `\x`...)
			buf = append(buf, hex[s[0]>>4], hex[s[0]&0xf])
		case strconv.IsPrint(r):
			buf = append(buf, s[:n]...)
		default:
			q := strconv.QuoteRune(r) // '\x1b'
			buf = append(buf, q[1:len(q)-1]...)
		}
		s = s[n:]
	}
	return string(buf)
}

// Bytes returns b with every unsafe rune but newline and tab escaped as a
// JSON \uXXXX escape (a surrogate pair above U+FFFF), and every byte that
// is not UTF-8 as \ufffd. The output of a JSON encoder stays valid JSON
// that decodes to the same values, since such runes can only sit inside its
// strings; slog's JSON handler and encoding/json escape C0 controls but let
// DEL, C1 controls and bidi overrides through. A safe b is returned
// unchanged (not copied). Bytes is safe for concurrent use.
func Bytes(b []byte) []byte {
	i := firstUnsafe(string(b), true)
	if i < 0 {
		return b
	}
	buf := make([]byte, 0, len(b)+16)
	buf = append(buf, b[:i]...)
	for b = b[i:]; len(b) > 0; {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n == 1:
			buf = append(buf, `\ufffd`...)
		case r == '\n' || r == '\t' || strconv.IsPrint(r):
			buf = append(buf, b[:n]...)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			buf = appendU(appendU(buf, r1), r2)
		default:
			buf = appendU(buf, r)
		}
		b = b[n:]
	}
	return buf
}

const hex = "0123456789abcdef"

// appendU appends the JSON escape \uXXXX of r, which is at most U+FFFF.
func appendU(buf []byte, r rune) []byte {
	return append(buf, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
}

// firstUnsafe is the index of the first unsafe rune or non-UTF-8 byte of s,
// or -1; with keepLines, newline and tab are safe.
func firstUnsafe(s string, keepLines bool) int {
	for i, r := range s {
		if r < utf8.RuneSelf && r >= ' ' && r != 0x7f { // the fast path: printable ASCII
			continue
		}
		if keepLines && (r == '\n' || r == '\t') {
			continue
		}
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return i
			}
		}
		if !strconv.IsPrint(r) {
			return i
		}
	}
	return -1
}

// NewWriter returns a writer that passes each Write through [Bytes] to w.
// Each Write must hold whole runes, as the writes of slog's handlers and of
// a json.Encoder do: a rune cut in two is escaped as two \ufffd. Write
// reports len(p) on success. The writer is as safe for concurrent use as w.
func NewWriter(w io.Writer) io.Writer { return writer{w} }

type writer struct{ w io.Writer }

func (w writer) Write(p []byte) (int, error) {
	q := Bytes(p)
	if _, err := w.w.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}
