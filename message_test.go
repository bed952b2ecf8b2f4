package outbox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewMessageID(t *testing.T) {
	t.Parallel()
	const n = 20_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = NewMessageID()
	}
	seen := make(map[string]bool, n)
	for i, id := range ids {
		require.Regexp(t, uuidV7, id)
		require.False(t, seen[id], "duplicate id %s", id)
		seen[id] = true
		if i > 0 {
			require.Less(t, ids[i-1], id, "ids made by one goroutine must sort in order")
		}
	}
	// The timestamp is the current Unix time in milliseconds.
	id := NewMessageID()
	var ms int64
	_, err := fmt.Sscanf(strings.ReplaceAll(id[:13], "-", ""), "%x", &ms)
	require.NoError(t, err)
	require.InDelta(t, time.Now().UnixMilli(), ms, 5000)
}

func TestNewMessageIDConcurrent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			local := make([]string, 2000)
			for i := range local {
				local[i] = NewMessageID()
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range local {
				require.False(t, seen[id])
				seen[id] = true
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, 16000)
}

func validMsg() *Message {
	return &Message{AggregateType: "order", AggregateID: "42", EventType: "ORDER_PAID", Payload: []byte(`{"a":1}`)}
}

func TestMessageValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		edit   func(*Message)
		field  string // "" = valid
		reason string
	}{
		{"Valid", func(*Message) {}, "", ""},
		{"NullPayload", func(m *Message) { m.Payload = []byte(`null`) }, "", ""},
		{"EmptyAggregateType", func(m *Message) { m.AggregateType = "" }, "AggregateType", "is empty"},
		{"EmptyAggregateID", func(m *Message) { m.AggregateID = "" }, "AggregateID", "is empty"},
		{"EmptyEventType", func(m *Message) { m.EventType = "" }, "EventType", "is empty"},
		{"LongMessageID", func(m *Message) { m.MessageID = strings.Repeat("a", 65) }, "MessageID", "longer than 64"},
		{"LongTopic", func(m *Message) { m.Topic = strings.Repeat("t", 256) }, "Topic", "longer than 255"},
		{"BadUTF8", func(m *Message) { m.AggregateID = "\xff" }, "AggregateID", "UTF-8"},
		{"EmptyPayload", func(m *Message) { m.Payload = nil }, "Payload", "is empty"},
		{"InvalidJSON", func(m *Message) { m.Payload = []byte(`{"a":}`) }, "Payload", "not valid JSON"},
		{"TooLarge", func(m *Message) { m.Payload = []byte(`"` + strings.Repeat("x", 100) + `"`) }, "Payload", "over the limit of 64"},
		{"EmptyHeaderName", func(m *Message) { m.Headers = map[string]string{"": "x"} }, "Headers", "empty"},
		{"DeliverLater", func(m *Message) { m.DeliverAt = time.Now().Add(time.Hour) }, "", ""},
		{"DeliverInThePast", func(m *Message) { m.DeliverAt = time.Now().Add(-time.Hour) }, "", ""},
		{"ExpiresLater", func(m *Message) { m.ExpiresAt = time.Now().Add(time.Hour) }, "", ""},
		{"DeliverBeforeExpiry", func(m *Message) {
			m.DeliverAt, m.ExpiresAt = time.Now().Add(time.Minute), time.Now().Add(time.Hour)
		}, "", ""},
		{"ExpiryPast", func(m *Message) { m.ExpiresAt = time.Now().Add(-time.Second) }, "ExpiresAt", "already past"},
		{"DeliverAfterExpiry", func(m *Message) {
			m.DeliverAt, m.ExpiresAt = time.Now().Add(time.Hour), time.Now().Add(time.Minute)
		}, "DeliverAt", "not before ExpiresAt"},
		{"DeliverAtExpiry", func(m *Message) {
			m.ExpiresAt = time.Now().Add(time.Hour)
			m.DeliverAt = m.ExpiresAt
		}, "DeliverAt", "not before ExpiresAt"},
		{"DeliverAtYear10000", func(m *Message) { m.DeliverAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "DeliverAt", "1970 to 9999"},
		{"ExpiresAtBefore1970", func(m *Message) { m.ExpiresAt = time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC) }, "ExpiresAt", "1970 to 9999"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := validMsg()
			tc.edit(m)
			err := m.validate(3, 64, time.Now())
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var verr *ValidationError
			require.ErrorAs(t, err, &verr)
			require.ErrorIs(t, err, ErrInvalidMessage)
			require.Equal(t, tc.field, verr.Field)
			require.Equal(t, 3, verr.Index)
			require.Contains(t, err.Error(), tc.reason)
		})
	}
}

func TestMessageDefaults(t *testing.T) {
	t.Parallel()
	m := validMsg()
	require.Equal(t, "42", m.Key())
	require.Equal(t, "ORDER_PAID", m.Destination())
	m.PartitionKey, m.Topic = "tenant-1", "orders.paid"
	require.Equal(t, "tenant-1", m.Key())
	require.Equal(t, "orders.paid", m.Destination())

	m.MessageID = "id-1"
	m.Headers = map[string]string{"x": "y", HeaderMessageID: "spoofed"}
	h := m.StandardHeaders()
	require.Equal(t, map[string]string{"x": "y", HeaderMessageID: "id-1", HeaderAggregateType: "order",
		HeaderAggregateID: "42", HeaderEventType: "ORDER_PAID", HeaderPartitionKey: "tenant-1"}, h)
	require.Equal(t, "spoofed", m.Headers[HeaderMessageID], "StandardHeaders must not modify the message")
}

// recordingInserter is a TxInserter that keeps what it was given, to test the
// Writer's own logic (ids, trace context, validation before insert).
type recordingInserter struct{ got [][]*Message }

func (r *recordingInserter) InsertTx(_ context.Context, _ struct{}, msgs []*Message) error {
	r.got = append(r.got, msgs)
	return nil
}

func TestWriterFillsIDsAndTraceContext(t *testing.T) {
	t.Parallel()
	ins := &recordingInserter{}
	w := NewWriter[struct{}](ins)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState("vendor=x")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts}))

	a, b := validMsg(), validMsg()
	b.MessageID = "given"
	b.Headers = map[string]string{HeaderTraceparent: "00-keep-mine"}
	require.NoError(t, w.Write(ctx, struct{}{}, a, b))
	require.Len(t, ins.got, 1)
	require.Regexp(t, uuidV7, a.MessageID)
	require.Equal(t, "given", b.MessageID)
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", a.Headers[HeaderTraceparent])
	require.Equal(t, "vendor=x", a.Headers[HeaderTracestate])
	require.Equal(t, "00-keep-mine", b.Headers[HeaderTraceparent])

	// Without a span in ctx no trace headers appear.
	c := validMsg()
	require.NoError(t, w.Write(context.Background(), struct{}{}, c))
	require.NotContains(t, c.Headers, HeaderTraceparent)

	// An invalid message anywhere in the call means nothing is inserted.
	bad := validMsg()
	bad.Payload = []byte("nope")
	err := w.Write(ctx, struct{}{}, validMsg(), bad)
	require.ErrorIs(t, err, ErrInvalidMessage)
	require.Len(t, ins.got, 2)
}

// deletingInserter also records the deletes of WithDeleteAfterInsert.
type deletingInserter struct {
	recordingInserter
	deleted [][]*Message
}

func (d *deletingInserter) DeleteTx(_ context.Context, _ struct{}, msgs []*Message) error {
	d.deleted = append(d.deleted, msgs)
	return nil
}

func TestWriterDeleteAfterInsert(t *testing.T) {
	t.Parallel()
	ins := &deletingInserter{}
	w := NewWriter[struct{}](ins, WithDeleteAfterInsert())
	a, b := validMsg(), validMsg()
	require.NoError(t, w.Write(context.Background(), struct{}{}, a, b))
	require.Equal(t, [][]*Message{{a, b}}, ins.got)
	require.Equal(t, [][]*Message{{a, b}}, ins.deleted, "the rows are deleted in the same transaction")

	// Without the option nothing is deleted.
	plain := &deletingInserter{}
	require.NoError(t, NewWriter[struct{}](plain).Write(context.Background(), struct{}{}, validMsg()))
	require.Empty(t, plain.deleted)

	// A store that cannot delete is a programmer error, found at construction.
	require.Panics(t, func() { NewWriter[struct{}](&recordingInserter{}, WithDeleteAfterInsert()) })
}

func TestErrorClasses(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	require.Nil(t, Permanent(nil))
	require.Nil(t, Unavailable(nil))
	p, u := Permanent(base), Unavailable(base)
	require.True(t, IsPermanent(p))
	require.False(t, IsUnavailable(p))
	require.True(t, IsUnavailable(u))
	require.False(t, IsPermanent(u))
	require.ErrorIs(t, p, base)
	require.ErrorIs(t, fmt.Errorf("wrapped: %w", u), ErrUnavailable)
	require.Equal(t, "boom", p.Error())
}

func TestWholeBatchUnavailable(t *testing.T) {
	t.Parallel()
	down := Unavailable(errors.New("no connection"))
	cases := []struct {
		name string
		errs []error
		want bool
	}{
		{"Empty", nil, false},
		{"AllUnavailable", []error{down, down}, true},
		{"AllTimedOut", []error{context.DeadlineExceeded, fmt.Errorf("ack: %w", context.DeadlineExceeded)}, true},
		{"OneSucceeded", []error{down, nil}, false},
		{"OneRejected", []error{down, errors.New("rejected")}, false},
		{"OnePermanent", []error{down, Permanent(context.DeadlineExceeded)}, false},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, wholeBatchUnavailable(tc.errs) != nil, tc.name)
	}
}
