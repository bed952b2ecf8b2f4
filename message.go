package outbox

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outbox/internal/mediatype"
)

// Status is the state of an outbox row, as stored in its status column.
type Status int16

// The values of the status column (the table contract).
const (
	StatusPending Status = 0 // waiting to be published (or leased by a relay)
	StatusSent    Status = 1 // confirmed by the broker
	StatusDead    Status = 2 // gave up: attempts used, or refused for good
)

// String returns pending, sent, dead or the number.
func (s Status) String() string {
	switch s {
	case StatusPending:
		return "pending"
	case StatusSent:
		return "sent"
	case StatusDead:
		return "dead"
	}
	return fmt.Sprintf("status(%d)", int16(s))
}

// Limits of the table contract's varchar(64) columns.
const (
	// MaxIDLength is the longest MessageID, AggregateType, AggregateID and EventType accepted.
	MaxIDLength = 64
	// MaxTopicLength is the longest Topic and PartitionKey accepted.
	MaxTopicLength = 255
)

// Standard header names that every publisher attaches to a message (where the
// broker has headers), so consumers can deduplicate and route without parsing
// the payload.
const (
	HeaderMessageID     = "outbox-message-id"
	HeaderAggregateType = "outbox-aggregate-type"
	HeaderAggregateID   = "outbox-aggregate-id"
	HeaderEventType     = "outbox-event-type"
	HeaderPartitionKey  = "outbox-partition-key" // only when Message.PartitionKey is set
	HeaderTraceparent   = "traceparent"
	HeaderTracestate    = "tracestate"
)

// Message is one outbox row: an event about a business entity (the aggregate).
//
// A caller fills AggregateType, AggregateID, EventType and Payload, and may set
// MessageID (otherwise a UUIDv7 is generated), Topic, PartitionKey and Headers.
// The Writer validates it; stores fill RowID, CreatedAt and Attempt when they
// read it back.
type Message struct {
	// RowID is the row's id column (write order), assigned by the database.
	RowID int64
	// MessageID is the global id consumers deduplicate on. Generated (UUIDv7) when empty.
	MessageID string
	// AggregateType names the kind of business entity, e.g. "order".
	AggregateType string
	// AggregateID identifies the entity; it is the default partition key.
	AggregateID string
	// EventType names what happened, e.g. "ORDER_PAID"; it is the default topic.
	EventType string
	// Topic overrides the destination (subject, topic, routing key). Optional.
	Topic string
	// PartitionKey overrides the key that keeps one aggregate's messages in order. Optional.
	PartitionKey string
	// Payload is the message body: any bytes, and valid JSON when the
	// content type is JSON (see [Message.JSONPayload]). Never empty.
	Payload []byte
	// ContentType is the payload's media type (RFC 6838), carried to the broker
	// the way its protocol expects. Empty means ContentTypeJSON. At most
	// MaxTopicLength bytes; the Writer checks it with mime.ParseMediaType.
	ContentType string
	// Headers are string metadata carried to the broker (trace context and the caller's own).
	Headers map[string]string
	// DeliverAt, when set, is the earliest time the message is published:
	// until then no relay claims it (the store keeps it in its own
	// deliver_at column, and the claim's due time starts there). A time in
	// the past means now. With ordering on, a delayed message holds back the
	// later messages of its aggregate until it is sent (docs/ordering.md).
	// Optional; stored to the microsecond.
	DeliverAt time.Time
	// ExpiresAt, when set, is the time after which the message is worthless:
	// a relay that claims it later does not publish it but marks it dead,
	// with a reason that starts with "expired" ([ErrExpired]). It must be
	// after DeliverAt, and the Writer refuses one already past. Optional.
	ExpiresAt time.Time
	// CreatedAt is when the row was written (set by the store on read).
	CreatedAt time.Time
	// Attempt is the 1-based number of the delivery attempt this claim makes,
	// which is also the claim's fencing token (set by the store on claim).
	Attempt int
}

// ContentTypeJSON is the content type of a message that sets none.
const ContentTypeJSON = "application/json"

// MediaType returns ContentType, or ContentTypeJSON when it is empty.
func (m *Message) MediaType() string {
	if m.ContentType != "" {
		return m.ContentType
	}
	return ContentTypeJSON
}

// JSONPayload reports whether the message's media type is JSON:
// application/json or a type with the +json structured syntax suffix (RFC
// 6839), such as application/cloudevents+json, parameters aside. Such a
// payload must be valid JSON; any other is opaque bytes.
func (m *Message) JSONPayload() bool {
	if m.ContentType == "" {
		return true
	}
	return IsJSONMediaType(m.ContentType)
}

// IsJSONMediaType reports whether the media type ct (parameters allowed) is
// application/json or ends in +json, ignoring case.
func IsJSONMediaType(ct string) bool {
	t, _, _ := strings.Cut(ct, ";")
	t = strings.ToLower(strings.TrimSpace(t))
	return t == ContentTypeJSON || (strings.HasSuffix(t, "+json") && strings.Contains(t, "/"))
}

// Key returns the partition key: PartitionKey when set, else AggregateID.
func (m *Message) Key() string {
	if m.PartitionKey != "" {
		return m.PartitionKey
	}
	return m.AggregateID
}

// Destination returns the topic the message goes to: Topic when set, else EventType.
func (m *Message) Destination() string {
	if m.Topic != "" {
		return m.Topic
	}
	return m.EventType
}

// StandardHeaders returns the message's headers plus the standard outbox
// headers (message id, aggregate type and id, event type, and the partition
// key when one is set). The caller's own
// headers never override the standard ones. The result is a new map.
func (m *Message) StandardHeaders() map[string]string {
	// Not a loop over StandardHeadersSeq, so that it stays small enough to
	// inline: a caller's map that does not escape then stays on the stack.
	h := make(map[string]string, len(m.Headers)+4)
	for k, v := range m.Headers {
		h[k] = v
	}
	h[HeaderMessageID] = m.MessageID
	h[HeaderAggregateType] = m.AggregateType
	h[HeaderAggregateID] = m.AggregateID
	h[HeaderEventType] = m.EventType
	if m.PartitionKey != "" {
		h[HeaderPartitionKey] = m.PartitionKey
	}
	return h
}

// StandardHeadersSeq returns an iterator over the pairs of StandardHeaders
// without building a map, for publishers that copy them into a broker's own
// header type: each name once, first the caller's own headers in map order
// (less those a standard header replaces), then the standard ones.
func (m *Message) StandardHeadersSeq() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for k, v := range m.Headers {
			if m.standardHeader(k) {
				continue
			}
			if !yield(k, v) {
				return
			}
		}
		if !yield(HeaderMessageID, m.MessageID) ||
			!yield(HeaderAggregateType, m.AggregateType) ||
			!yield(HeaderAggregateID, m.AggregateID) ||
			!yield(HeaderEventType, m.EventType) {
			return
		}
		if m.PartitionKey != "" {
			yield(HeaderPartitionKey, m.PartitionKey)
		}
	}
}

// standardHeader reports whether a standard header of m takes the name k.
func (m *Message) standardHeader(k string) bool {
	switch k {
	case HeaderMessageID, HeaderAggregateType, HeaderAggregateID, HeaderEventType:
		return true
	case HeaderPartitionKey:
		return m.PartitionKey != ""
	}
	return false
}

// ErrInvalidMessage is the sentinel every *ValidationError matches with errors.Is.
var ErrInvalidMessage = errors.New("outbox: invalid message")

// ValidationError says which field of which message is wrong and why.
type ValidationError struct {
	Index  int    // position of the message in the call
	Field  string // e.g. "Payload"
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("outbox: invalid message %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Is reports whether target is ErrInvalidMessage.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidMessage }

// ErrExpired is matched (errors.Is) by the reason a relay gives a message
// it did not publish because its ExpiresAt had passed when it was claimed.
// The reason stored in the dead row starts with "expired".
var ErrExpired = errors.New("outbox: message expired")

// ExpiredError is the reason of a message that expired before a relay
// could publish it; it matches ErrExpired.
type ExpiredError struct {
	ExpiresAt time.Time // the message's expiry
	ClaimedAt time.Time // when the relay claimed it
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("expired at %s, claimed %v later", e.ExpiresAt.UTC().Format(time.RFC3339Nano),
		e.ClaimedAt.Sub(e.ExpiresAt).Round(time.Millisecond))
}

// Is reports whether target is ErrExpired.
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// Expired reports whether the message has an ExpiresAt that is before now.
func (m *Message) Expired(now time.Time) bool {
	return !m.ExpiresAt.IsZero() && now.After(m.ExpiresAt)
}

// Earliest and latest times a DeliverAt or ExpiresAt may hold: every store's
// timestamp type holds them (MySQL's DATETIME stops at year 9999).
var (
	minMessageTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxMessageTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// validateTimes checks DeliverAt and ExpiresAt against each other and now.
func (m *Message) validateTimes(now time.Time) (field, reason string) {
	for _, f := range []struct {
		name string
		t    time.Time
	}{{"DeliverAt", m.DeliverAt}, {"ExpiresAt", m.ExpiresAt}} {
		if !f.t.IsZero() && (f.t.Before(minMessageTime) || f.t.After(maxMessageTime)) {
			return f.name, fmt.Sprintf("%s is outside the years 1970 to 9999 that every store holds", f.t.Format(time.RFC3339))
		}
	}
	switch {
	case m.ExpiresAt.IsZero():
		return "", ""
	case !m.ExpiresAt.After(now):
		return "ExpiresAt", fmt.Sprintf("%s is already past (now %s): the message would never be published",
			m.ExpiresAt.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	case !m.DeliverAt.IsZero() && !m.DeliverAt.Before(m.ExpiresAt):
		return "DeliverAt", fmt.Sprintf("%s is not before ExpiresAt %s: the message would never be published",
			m.DeliverAt.UTC().Format(time.RFC3339Nano), m.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	return "", ""
}

// validate checks a message against the table contract, the payload limit
// and the time now (for ExpiresAt). maxPayload <= 0 means no limit.
func (m *Message) validate(i, maxPayload int, now time.Time) error {
	bad := func(field, reason string) error { return &ValidationError{Index: i, Field: field, Reason: reason} }
	if m == nil {
		return bad("Message", "is nil")
	}
	for _, f := range []struct {
		name, v  string
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
		switch {
		case f.required && f.v == "":
			return bad(f.name, "is empty")
		case len(f.v) > f.max:
			return bad(f.name, fmt.Sprintf("is %d bytes, longer than %d", len(f.v), f.max))
		case !utf8.ValidString(f.v):
			return bad(f.name, "is not valid UTF-8")
		}
	}
	if m.ContentType != "" {
		if err := checkMediaType(m.ContentType); err != nil {
			return bad("ContentType", err.Error())
		}
	}
	if len(m.Payload) == 0 {
		return bad("Payload", "is empty (use null or {} for an empty JSON body)")
	}
	if maxPayload > 0 && len(m.Payload) > maxPayload {
		return bad("Payload", fmt.Sprintf("is %d bytes, over the limit of %d", len(m.Payload), maxPayload))
	}
	if m.JSONPayload() && !json.Valid(m.Payload) {
		return bad("Payload", fmt.Sprintf("is not valid JSON, which content type %s requires", m.MediaType()))
	}
	for k, v := range m.Headers {
		if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) {
			return bad("Headers", fmt.Sprintf("header %q is empty or not valid UTF-8", k))
		}
	}
	if field, reason := m.validateTimes(now); field != "" {
		return bad(field, reason)
	}
	return nil
}

// checkMediaType says what is wrong with a content type that is set, or nil.
func checkMediaType(ct string) error {
	switch {
	case strings.TrimSpace(ct) == "":
		return fmt.Errorf("%q is blank (leave it empty for %s)", ct, ContentTypeJSON)
	case len(ct) > MaxTopicLength:
		return fmt.Errorf("is %d bytes, longer than %d", len(ct), MaxTopicLength)
	case !utf8.ValidString(ct):
		return errors.New("is not valid UTF-8")
	}
	return mediatype.Check(ct)
}

// NewMessageID returns a new UUIDv7 (RFC 9562) as a 36-character string.
// IDs made by one process sort in the order they were made. Safe for concurrent use.
func NewMessageID() string {
	var u [16]byte
	ms, seq := uuidClock()
	binary.BigEndian.PutUint64(u[0:8], ms<<16|uint64(seq&0x0fff))
	if _, err := rand.Read(u[8:]); err != nil {
		panic("outbox: crypto/rand failed: " + err.Error()) // never happens on supported platforms
	}
	u[6] = 0x70 | (u[6] & 0x0f) // version 7 in the top nibble of rand_a
	u[8] = 0x80 | (u[8] & 0x3f) // variant 10
	var out [36]byte
	hex.Encode(out[0:8], u[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], u[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], u[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], u[8:10])
	out[23] = '-'
	hex.Encode(out[24:], u[10:])
	return string(out[:])
}

var uuidMu struct {
	sync.Mutex
	lastMS uint64
	seq    uint16
}

// uuidClock returns the millisecond timestamp and a 12-bit counter that keeps
// IDs made in the same millisecond in order (RFC 9562, method 1).
func uuidClock() (uint64, uint16) {
	uuidMu.Lock()
	defer uuidMu.Unlock()
	ms := uint64(time.Now().UnixMilli())
	if ms <= uuidMu.lastMS {
		uuidMu.seq++
		if uuidMu.seq > 0x0fff { // counter overflow: borrow the next millisecond
			uuidMu.lastMS++
			uuidMu.seq = 0
		}
		ms = uuidMu.lastMS
	} else {
		uuidMu.lastMS = ms
		uuidMu.seq = 0
	}
	return ms, uuidMu.seq
}
