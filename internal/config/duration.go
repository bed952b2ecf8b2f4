package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// day is the unit that [ParseDuration] adds to Go's: 24 hours, whatever the
// calendar says (a duration setting is an interval, not a date).
const day = 24 * time.Hour

// maxDays is the most days a time.Duration holds (about 292 years).
const maxDays = math.MaxInt64 / int64(day)

// ParseDuration parses a duration as every duration setting takes it, in the
// YAML file, an OUTBOX_* variable or a flag: Go's form (500ms, 1m30s, 36h, 0;
// see [time.ParseDuration]) or a whole number of days in front of it (7d,
// 1d12h, 2d30m). An optional sign applies to the whole duration, as in Go.
// The command line's --older-than ages use it too.
func ParseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	bad := fmt.Errorf("%q is not a duration (like 500ms, 2s, 1m30s)", s)
	sign, rest := "", in
	if rest != "" && (rest[0] == '-' || rest[0] == '+') {
		sign, rest = rest[:1], rest[1:]
	}
	i := 0
	for i < len(rest) && '0' <= rest[i] && rest[i] <= '9' {
		i++
	}
	if i == 0 || i == len(rest) || rest[i] != 'd' {
		// No day count: Go's form, where "d" is no unit.
		d, err := time.ParseDuration(in)
		if err != nil {
			return 0, bad
		}
		return d, nil
	}
	n, err := strconv.ParseInt(rest[:i], 10, 64)
	if err != nil || n > maxDays {
		return 0, bad
	}
	d := time.Duration(n) * day
	if rest = rest[i+1:]; rest != "" {
		// The rest is Go's form without a sign, and with a unit: "1d-5h" and
		// "1d0" are typos, not 19h and 1d.
		if c := rest[0]; (c < '0' || c > '9') && c != '.' || rest == "0" {
			return 0, bad
		}
		r, err := time.ParseDuration(rest)
		if err != nil || r > math.MaxInt64-d {
			return 0, bad
		}
		d += r
	}
	if sign == "-" {
		d = -d
	}
	return d, nil
}

// FormatDuration writes d as [ParseDuration] reads it: whole days as "7d",
// anything else in Go's form ("36h0m0s", "1s").
func FormatDuration(d time.Duration) string {
	if d >= day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

var durationType = reflect.TypeFor[time.Duration]()

// expandDays returns data with every duration that the YAML decoder cannot
// read, because it is written with days (archive_older_than: 7d), rewritten in
// Go's form (168h0m0s). doc is data parsed, and t the type data decodes into.
//
// The decoder parses time.Duration with time.ParseDuration and offers no hook
// (the type is not ours), and the strict decode that checks keys reads bytes,
// not a node. So the rewrite is done in the text, each value in place on its
// line: an error of the decode that follows names the same line as before.
// A value the rewrite cannot find where the parser says it is (an anchor or
// tag in front of it, an escape in quotes) stays as written, and the decoder
// refuses it as before; the rewrite never guesses.
func expandDays(data []byte, doc *yaml.Node, t reflect.Type) []byte {
	type edit struct {
		off, n int // bytes of data to replace
		with   string
	}
	var edits []edit
	var lines [][2]int // [start, end) of each line, as the YAML scanner breaks them
	walkDurations(doc, t, func(n *yaml.Node) {
		if _, err := time.ParseDuration(n.Value); err == nil {
			return // the decoder reads it
		}
		d, err := ParseDuration(n.Value)
		if err != nil || strings.TrimSpace(n.Value) != n.Value {
			return
		}
		var quote string
		switch n.Style {
		case 0:
		case yaml.DoubleQuotedStyle:
			quote = `"`
		case yaml.SingleQuotedStyle:
			quote = `'`
		default:
			return
		}
		if lines == nil {
			lines = yamlLines(data)
		}
		if n.Line < 1 || n.Line > len(lines) || n.Column < 1 {
			return
		}
		off, end := lines[n.Line-1][0], lines[n.Line-1][1]
		for range n.Column - 1 { // the column counts characters
			if off >= end {
				return
			}
			_, w := utf8.DecodeRune(data[off:end])
			off += w
		}
		raw := quote + n.Value + quote
		if !strings.HasPrefix(string(data[off:end]), raw) {
			return
		}
		edits = append(edits, edit{off + len(quote), len(n.Value), d.String()})
	})
	if len(edits) == 0 {
		return data
	}
	slices.SortFunc(edits, func(a, b edit) int { return a.off - b.off })
	out := make([]byte, 0, len(data)+8*len(edits))
	last := 0
	for _, e := range edits {
		if e.off < last { // one node reached twice; it is rewritten once
			continue
		}
		out = append(out, data[last:e.off]...)
		out = append(out, e.with...)
		last = e.off + e.n
	}
	return append(out, data[last:]...)
}

// walkDurations calls fn for each scalar of n that decodes into a
// time.Duration of t, following the yaml tags of struct fields, slices,
// maps and pointers. Keys that t does not know are skipped (the strict
// decode reports them), and so are aliases (fn sees the anchored node where
// it is written, if a duration is written there).
func walkDurations(n *yaml.Node, t reflect.Type, fn func(*yaml.Node)) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			walkDurations(c, t, fn)
		}
	case yaml.ScalarNode:
		if t == durationType {
			fn(n)
		}
	case yaml.SequenceNode:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for _, c := range n.Content {
				walkDurations(c, t.Elem(), fn)
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			switch t.Kind() {
			case reflect.Map:
				walkDurations(n.Content[i+1], t.Elem(), fn)
			case reflect.Struct:
				if f, ok := yamlField(t, n.Content[i].Value); ok {
					walkDurations(n.Content[i+1], f.Type, fn)
				}
			}
		}
	}
}

// yamlField returns the field of struct type t whose yaml tag names key.
func yamlField(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); f.IsExported() && name == key && name != "-" {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlLines returns the [start, end) byte range of each line of data, broken
// where the YAML scanner counts a new line: at \r\n, \r, \n, NEL, LS and PS.
func yamlLines(data []byte) [][2]int {
	var lines [][2]int
	start := 0
	for i := 0; i < len(data); {
		w := 0
		switch {
		case data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n':
			w = 2
		case data[i] == '\r' || data[i] == '\n':
			w = 1
		case i+1 < len(data) && data[i] == 0xC2 && data[i+1] == 0x85: // NEL
			w = 2
		case i+2 < len(data) && data[i] == 0xE2 && data[i+1] == 0x80 && (data[i+2] == 0xA8 || data[i+2] == 0xA9): // LS, PS
			w = 3
		}
		if w == 0 {
			i++
			continue
		}
		lines = append(lines, [2]int{start, i})
		i += w
		start = i
	}
	return append(lines, [2]int{start, len(data)})
}
