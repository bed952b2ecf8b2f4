package sqlcore

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/rowcheck"
)

// The columns a claim decodes; the optional ones only when the table has them.
const (
	ColID            = "id"
	ColRetryCount    = "retry_count"
	ColMessageID     = "message_id"
	ColAggregateType = "aggregate_type"
	ColAggregateID   = "aggregate_id"
	ColEventType     = "event_type"
	ColPayload       = "payload"
	ColCreatedAt     = "created_at"
	ColHeaders       = "headers"
	ColTopic         = "topic"
	ColPartitionKey  = "partition_key"
)

// SelectColumns are the columns of a message a claim reads, in order: the
// contract's, then the optional ones the table has.
func SelectColumns(c Columns) []string {
	sel := []string{ColMessageID, ColAggregateType, ColAggregateID, ColEventType, ColPayload, ColCreatedAt}
	if c.Headers {
		sel = append(sel, ColHeaders)
	}
	if c.Topic {
		sel = append(sel, ColTopic)
	}
	if c.PartitionKey {
		sel = append(sel, ColPartitionKey)
	}
	return sel
}

// ClaimColumns is the select list of the columns sel, each after prefix (an
// alias and a dot, or ""). With a payload limit (above 0), it reads at most
// limit + 1 characters of the payload: all of a payload within the limit (a
// character takes at least a byte), and enough of a larger one to tell, so
// that no huge payload is read into memory (a claim then reads its size on
// its own). The limit is an integer, not text from outside.
func (d *Dialect) ClaimColumns(prefix string, sel []string, maxPayload int) string {
	cols := make([]string, len(sel))
	for i, col := range sel {
		cols[i] = prefix + col
		if col == ColPayload && maxPayload > 0 {
			cols[i] = fmt.Sprintf(d.PayloadPrefix, prefix+col, maxPayload+1)
		}
	}
	return strings.Join(cols, ", ")
}

// DecodeRow turns a claimed row's columns sel, scanned into vals, into a
// Message (id and retry_count, where sel has them, into RowID and Attempt).
// On failure it returns the Message with what could be read and an error
// naming every bad column.
func (d *Dialect) DecodeRow(sel []string, vals []any) (*outbox.Message, error) {
	m := &outbox.Message{}
	var errs []error
	for i, col := range sel {
		v := vals[i]
		switch col {
		case ColID:
			m.RowID, _ = v.(int64)
		case ColRetryCount:
			n, _ := v.(int64)
			m.Attempt = int(n)
		case ColMessageID:
			m.MessageID = required(col, v, &errs)
		case ColAggregateType:
			m.AggregateType = required(col, v, &errs)
		case ColAggregateID:
			m.AggregateID = required(col, v, &errs)
		case ColEventType:
			m.EventType = required(col, v, &errs)
		case ColTopic:
			m.Topic = optional(col, v, &errs)
		case ColPartitionKey:
			m.PartitionKey = optional(col, v, &errs)
		case ColCreatedAt:
			m.CreatedAt, _ = d.ParseTime(v) // only for latency; zero when unreadable
		case ColPayload:
			p, err := payload(v)
			if err != nil {
				errs = append(errs, err)
			}
			m.Payload = p
		case ColHeaders:
			h, err := headers(v)
			if err != nil {
				errs = append(errs, err)
			}
			m.Headers = h
		}
	}
	return m, errors.Join(errs...)
}

// Scanned is a row a claim or ListDead read (Scan).
type Scanned struct {
	Vals     []any           // the values of the columns sel, as scanned
	Message  *outbox.Message // decoded from them
	Err      error           // what decoding found wrong; nil for none
	TooLarge bool            // the payload was over the limit, so read only in part
}

// Scan reads the current row of rows into lead (pointers), then the columns
// sel, then tail (pointers), and decodes the columns (DecodeRow). A payload
// over maxPayload (above 0), which ClaimColumns read only in part, is
// replaced with partial first.
func (d *Dialect) Scan(rows *sql.Rows, sel []string, maxPayload int, partial any, lead, tail []any) (Scanned, error) {
	vals := make([]any, len(sel))
	ptrs := slices.Clone(lead)
	for i := range vals {
		ptrs = append(ptrs, &vals[i])
	}
	if err := rows.Scan(append(ptrs, tail...)...); err != nil {
		return Scanned{}, err
	}
	r := Scanned{Vals: vals}
	if at := slices.Index(sel, ColPayload); maxPayload > 0 && rowcheck.Len(vals[at]) > maxPayload {
		vals[at], r.TooLarge = partial, true
	}
	r.Message, r.Err = d.DecodeRow(sel, vals)
	return r, nil
}

// Text reads a text column scanned into an any. ok is false for NULL.
// Numbers (a column without text affinity, or an integer key) read as
// written.
func Text(v any) (s string, ok bool, err error) {
	switch v := v.(type) {
	case nil:
		return "", false, nil
	case []byte:
		s = string(v)
	case string:
		s = v
	case int64:
		return strconv.FormatInt(v, 10), true, nil
	case uint64:
		return strconv.FormatUint(v, 10), true, nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), true, nil
	default:
		return "", true, fmt.Errorf("is a %T, not text", v)
	}
	if !utf8.ValidString(s) {
		return s, true, errors.New("is not valid UTF-8")
	}
	return s, true, nil
}

func required(col string, v any, errs *[]error) string {
	s, ok, err := Text(v)
	switch {
	case err != nil:
		*errs = append(*errs, fmt.Errorf("%s %w", col, err))
	case !ok:
		*errs = append(*errs, fmt.Errorf("%s is NULL", col))
	case s == "":
		*errs = append(*errs, fmt.Errorf("%s is empty", col))
	}
	return s
}

func optional(col string, v any, errs *[]error) string {
	s, _, err := Text(v)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s %w", col, err))
	}
	return s
}

func payload(v any) (json.RawMessage, error) {
	s, ok, err := Text(v)
	switch {
	case err != nil:
		return json.RawMessage(s), fmt.Errorf("payload %w", err)
	case !ok:
		return nil, errors.New("payload is NULL")
	case !json.Valid([]byte(s)):
		return json.RawMessage(s), errors.New("payload is not valid JSON")
	}
	return json.RawMessage(s), nil
}

func headers(v any) (map[string]string, error) {
	s, ok, err := Text(v)
	if err != nil {
		return nil, fmt.Errorf("headers %w", err)
	}
	if !ok || s == "" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, fmt.Errorf("headers are not a JSON object of strings: %w", err)
	}
	if len(h) == 0 {
		return nil, nil
	}
	return h, nil
}

// ParseTime reads a timestamp column scanned into an any: a time.Time (by
// its wall clock in UTC with d.WallClockUTC), text in one of d.TimeLayouts
// (UTC unless it carries a zone), or with d.UnixSeconds an integer. ok is
// false for NULL and for what it cannot read.
func (d *Dialect) ParseTime(v any) (t time.Time, ok bool) {
	switch v := v.(type) {
	case time.Time:
		if d.WallClockUTC {
			return time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC), true
		}
		return v, true
	case int64:
		return time.Unix(v, 0), d.UnixSeconds
	case []byte:
		return d.parseTimeText(string(v))
	case string:
		return d.parseTimeText(v)
	}
	return time.Time{}, false
}

func (d *Dialect) parseTimeText(s string) (time.Time, bool) {
	for _, l := range d.TimeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// InsertColumns are the columns an INSERT of a message sets, in order: the
// contract's message columns, then the optional ones the table has.
func InsertColumns(c Columns) []string {
	return slices.DeleteFunc(SelectColumns(c), func(col string) bool { return col == ColCreatedAt })
}

// RowValues returns a message's values in the order of InsertColumns(c).
// Empty optional values are NULL.
func RowValues(m *outbox.Message, c Columns) ([]any, error) {
	row := []any{m.MessageID, m.AggregateType, m.AggregateID, m.EventType, string(m.Payload)}
	if c.Headers {
		var h any
		if len(m.Headers) > 0 {
			b, err := json.Marshal(m.Headers)
			if err != nil {
				return nil, fmt.Errorf("encode headers: %w", err)
			}
			h = string(b)
		}
		row = append(row, h)
	}
	if c.Topic {
		row = append(row, nullIfEmpty(m.Topic))
	}
	if c.PartitionKey {
		row = append(row, nullIfEmpty(m.PartitionKey))
	}
	return row, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
