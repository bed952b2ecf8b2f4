package sqlcore

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/mediatype"
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
	ColContentType   = "content_type"
	ColPayloadBytes  = "payload_bytes"
	ColDeliverAt     = "deliver_at"
	ColExpiresAt     = "expires_at"
	ColNextRetryAt   = "next_retry_at"
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
	if c.ContentType {
		sel = append(sel, ColContentType)
	}
	if c.PayloadBytes {
		sel = append(sel, ColPayloadBytes)
	}
	if c.DeliverAt {
		sel = append(sel, ColDeliverAt)
	}
	if c.ExpiresAt {
		sel = append(sel, ColExpiresAt)
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
		cols[i] = prefix + col + d.Casts[col]
		if (col == ColPayload || col == ColPayloadBytes) && maxPayload > 0 {
			cols[i] = fmt.Sprintf(d.PayloadPrefix, cols[i], maxPayload+1)
		}
	}
	return strings.Join(cols, ", ")
}

// PayloadSize is the SQL of a row's payload size in bytes, of the table
// aliased by prefix (an alias and a dot, or ""): payload_bytes's when it is
// set, else payload's.
func (d *Dialect) PayloadSize(prefix string, c Columns) string {
	size := fmt.Sprintf(d.PayloadBytes, prefix+ColPayload+d.Casts[ColPayload])
	if c.PayloadBytes {
		size = "COALESCE(" + fmt.Sprintf(d.PayloadBytes, prefix+ColPayloadBytes+d.Casts[ColPayloadBytes]) + ", " + size + ")"
	}
	return size
}

// DecodeRow turns a claimed row's columns sel, scanned into vals, into a
// Message (id and retry_count, where sel has them, into RowID and Attempt).
// On failure it returns the Message with what could be read and an error
// naming every bad column.
func (d *Dialect) DecodeRow(sel []string, vals []any) (*outbox.Message, error) {
	m := &outbox.Message{}
	var errs []error
	var body, bytesBody any // the payload and payload_bytes columns
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
		case ColDeliverAt:
			m.DeliverAt, _ = d.ParseTime(v) // for the record: next_retry_at decides when the row is due
		case ColExpiresAt:
			t, ok := d.ParseTime(v)
			if v != nil && !ok {
				errs = append(errs, fmt.Errorf("expires_at %v is not a time", v))
			}
			m.ExpiresAt = t
		case ColPayload:
			body = v
		case ColPayloadBytes:
			bytesBody = v
		case ColContentType:
			ct, err := ContentType(v)
			if err != nil {
				errs = append(errs, err)
			}
			m.ContentType = ct
		case ColHeaders:
			h, err := headers(v)
			if err != nil {
				errs = append(errs, err)
			}
			m.Headers = h
		}
	}
	if slices.Contains(sel, ColPayload) {
		p, err := payload(body, bytesBody, m.JSONPayload())
		if err != nil {
			errs = append(errs, err)
		}
		m.Payload = p
	}
	return m, errors.Join(errs...)
}

// ContentType reads a content_type column: NULL and "" are the default
// (application/json, returned as ""); anything else must be a media type.
func ContentType(v any) (string, error) {
	s, ok, err := Text(v)
	switch {
	case err != nil:
		return "", fmt.Errorf("content_type %w", err)
	case !ok || s == "":
		return "", nil
	}
	if mediatype.Check(s) != nil {
		return s, fmt.Errorf("content_type %q is not a media type", s)
	}
	return s, nil
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
func (d *Dialect) Scan(rows Scanner, sel []string, maxPayload int, partial any, lead, tail []any) (Scanned, error) {
	vals := make([]any, len(sel))
	ptrs := slices.Clone(lead)
	for i := range vals {
		ptrs = append(ptrs, &vals[i])
	}
	if err := rows.Scan(append(ptrs, tail...)...); err != nil {
		return Scanned{}, err
	}
	r := Scanned{Vals: vals}
	if at := slices.Index(sel, ColPayloadBytes); at >= 0 && maxPayload > 0 && rowcheck.Len(vals[at]) > maxPayload {
		vals[at], r.TooLarge = nil, true
		if p := slices.Index(sel, ColPayload); p >= 0 {
			vals[p] = partial
		}
	}
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

// payload reads a message's body: payload_bytes when it is not NULL (any
// bytes; valid JSON when the content type is JSON), else the payload column
// (text, valid JSON when the content type is JSON).
func payload(v, raw any, isJSON bool) ([]byte, error) {
	if raw != nil {
		var b []byte
		switch raw := raw.(type) {
		case []byte:
			b = slices.Clone(raw)
		case string:
			b = []byte(raw)
		default:
			return nil, fmt.Errorf("payload_bytes is a %T, not bytes", raw)
		}
		if isJSON && !json.Valid(b) {
			return b, errors.New("payload_bytes is not valid JSON, which the content type requires")
		}
		return b, nil
	}
	s, ok, err := Text(v)
	switch {
	case err != nil:
		return json.RawMessage(s), fmt.Errorf("payload %w", err)
	case !ok:
		return nil, errors.New("payload is NULL")
	case isJSON && !json.Valid([]byte(s)):
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
// contract's message columns, then the optional ones the table has; with
// deliver_at, next_retry_at after it, which gets the same time, so that a
// delayed row is due at its time through the claims' own filter.
func InsertColumns(c Columns) []string {
	var names []string
	for _, col := range SelectColumns(c) {
		switch col {
		case ColCreatedAt:
		case ColDeliverAt:
			names = append(names, col, ColNextRetryAt)
		default:
			names = append(names, col)
		}
	}
	return names
}

// RowValues returns a message's values in the order of InsertColumns(c).
// Empty optional values are NULL. A payload that is not JSON goes to
// payload_bytes, with JSON null in payload (docs/table-contract.md); a table
// without the columns such a message needs is an error that says to migrate.
func RowValues(m *outbox.Message, c Columns) ([]any, error) {
	if err := CanHold(m, c.ContentType, c.PayloadBytes); err != nil {
		return nil, err
	}
	if err := CanHoldTimes(m, c.DeliverAt, c.ExpiresAt); err != nil {
		return nil, err
	}
	var body, raw any = string(m.Payload), nil
	if !m.JSONPayload() {
		body, raw = "null", m.Payload
	}
	row := []any{m.MessageID, m.AggregateType, m.AggregateID, m.EventType, body}
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
	if c.ContentType {
		row = append(row, nullIfEmpty(m.ContentType))
	}
	if c.PayloadBytes {
		row = append(row, raw)
	}
	if c.DeliverAt {
		at := timeOrNull(m.DeliverAt)
		row = append(row, at, at) // deliver_at, next_retry_at
	}
	if c.ExpiresAt {
		row = append(row, timeOrNull(m.ExpiresAt))
	}
	return row, nil
}

// ErrNeedsMigrate is the error of a message the table cannot hold for lack
// of the content_type or payload_bytes column.
var ErrNeedsMigrate = errors.New("run `outbox migrate` to add the content_type and payload_bytes columns")

// CanHold reports, as an error matching ErrNeedsMigrate, whether a table
// with (or without) the content_type and payload_bytes columns can hold m:
// a content type other than the default needs content_type, and a payload
// that is not JSON needs payload_bytes too.
func CanHold(m *outbox.Message, contentType, payloadBytes bool) error {
	switch {
	case m.ContentType != "" && m.ContentType != outbox.ContentTypeJSON && !contentType:
		return fmt.Errorf("content type %s: the table has no content_type column: %w", m.ContentType, ErrNeedsMigrate)
	case !m.JSONPayload() && !payloadBytes:
		return fmt.Errorf("content type %s is not JSON and the table has no payload_bytes column: %w", m.ContentType, ErrNeedsMigrate)
	}
	return nil
}

// ErrNeedsTimeColumns is the error of a message with a DeliverAt or
// ExpiresAt that the table has no column for.
var ErrNeedsTimeColumns = errors.New("run `outbox migrate` to add the deliver_at and expires_at columns")

// CanHoldTimes reports, as an error matching ErrNeedsTimeColumns, whether a
// table with (or without) the deliver_at and expires_at columns can hold
// m's DeliverAt and ExpiresAt. A message that sets neither fits any table.
func CanHoldTimes(m *outbox.Message, deliverAt, expiresAt bool) error {
	switch {
	case !m.DeliverAt.IsZero() && !deliverAt:
		return fmt.Errorf("DeliverAt is set and the table has no deliver_at column: %w", ErrNeedsTimeColumns)
	case !m.ExpiresAt.IsZero() && !expiresAt:
		return fmt.Errorf("ExpiresAt is set and the table has no expires_at column: %w", ErrNeedsTimeColumns)
	}
	return nil
}

// timeOrNull is t as the stores write it (FormatTime), or NULL when zero.
func timeOrNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return FormatTime(t)
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
