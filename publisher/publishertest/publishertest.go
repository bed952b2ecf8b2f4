package publishertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// Default bounds of the suite.
const (
	// DefaultPublishTimeout is the deadline the suite gives a Publish call
	// that is expected to fail because the broker is down or silent.
	DefaultPublishTimeout = 2 * time.Second
	// DefaultRecoverTimeout is how long the suite lets a publisher take to
	// work again after the broker came back.
	DefaultRecoverTimeout = 30 * time.Second
	// DefaultReceiveTimeout bounds one wait for messages to reach a Receiver.
	DefaultReceiveTimeout = 15 * time.Second
	// slack is how much later than its ctx deadline a failing Publish may
	// return (scheduling on a loaded machine, race detector).
	slack = 1500 * time.Millisecond
	// quiet is how long the suite waits to see that a message does NOT arrive.
	quiet = 300 * time.Millisecond
)

// Features states what the broker behind a publisher guarantees, so the
// suite checks exactly that.
type Features struct {
	// OrderedPerKey: messages with one key (one aggregate), published one
	// batch after another by one publisher, reach the consumer in publish order.
	OrderedPerKey bool
	// Dedup: the broker drops a re-send of a MessageID it already stored
	// (NATS duplicate window, a dedup script). Without it the suite only
	// requires that a re-send is confirmed, not refused, and takes the
	// broker as at least once: where the suite checks that nothing more
	// arrives (after a refused message, after a re-send), a confirmed
	// message arriving again is allowed, a refused or unknown one never is.
	Dedup bool
	// Headers: the broker carries headers, so every standard header
	// ([outbox.Message.StandardHeaders], with traceparent and tracestate) and
	// the caller's own must arrive unchanged.
	Headers bool
	// MaxPayload is the largest payload, in bytes, that the publisher is
	// known to deliver with the standard headers; the suite sends one of
	// exactly this size among small ones. 0 skips the case.
	MaxPayload int
	// TooLargePayload is a payload size, in bytes, that the broker refuses
	// (over its message size limit); the suite expects [outbox.Permanent]
	// for that message alone, its batch-mates delivered. 0 means the broker
	// has no limit to test and skips the case.
	TooLargePayload int
	// ContentType: the publisher carries [outbox.Message.MediaType] the way
	// the broker expects it and the Receiver reports it in
	// [Received.ContentType], and the publisher accepts any bytes as a
	// payload. The suite then sends a payload that is not UTF-8 and one of
	// every byte value (0..255) and checks both arrive, byte for byte, with
	// their content type.
	ContentType bool
}

// Received is a message as a consumer of the broker saw it.
type Received struct {
	// MessageID is the message's id as the broker carried it (Nats-Msg-Id,
	// a header, an AMQP property, an envelope field).
	MessageID string
	// Key is the partition key as carried (Kafka record key); brokers
	// without keys report the aggregate id header.
	Key string
	// Topic is the destination the message was published to, as
	// [outbox.Message.Destination] named it: with any prefix the harness
	// configured removed.
	Topic string
	// Headers are the headers as carried; nil where the broker has none.
	Headers map[string]string
	// Payload is the body, byte for byte.
	Payload []byte
	// ContentType is the payload's media type as carried (a header, a
	// property, a field); checked with [Features.ContentType].
	ContentType string
}

// Receiver reads what reached a destination, from the broker itself (a real
// consumer), never from the publisher's memory.
type Receiver interface {
	// Receive waits until n more messages have arrived since the previous
	// call and returns them in arrival order. When ctx ends first it returns
	// those that did arrive and ctx's error. It is called from one goroutine.
	Receive(ctx context.Context, n int) ([]Received, error)
}

// Dest is a fresh destination (stream, topic, queue, key) of one test, with
// a publisher and a receiver on it.
type Dest struct {
	// Publisher publishes to the destination; the suite never closes it.
	Publisher outbox.Publisher
	// Receiver reads from the destination.
	Receiver Receiver
	// Topic is set as Message.Topic on every message the suite publishes;
	// the harness makes sure it reaches Receiver. Required.
	Topic string
}

// OutageDest is a [Dest] whose broker connection the test can break, usually
// through internal/faultproxy.
type OutageDest struct {
	Dest
	// Cut makes the broker unreachable: connections reset, new ones refused
	// (faultproxy's Cut). Required.
	Cut func()
	// Restore undoes Cut and Stall. Required.
	Restore func()
	// Stall makes the broker silent: connections stay open, nothing is
	// answered (faultproxy's Blackhole). Optional.
	Stall func()
}

// Harness builds what the suite runs against. Each func is called once per
// subtest, with that subtest's t, and registers its own cleanup.
type Harness struct {
	// New returns a destination of its own for t. Required.
	New func(t *testing.T) Dest
	// Outage returns a destination reached through a connection the suite
	// can cut. Optional: its cases are skipped when nil.
	Outage func(t *testing.T) OutageDest
	// Down returns a publisher whose broker is not there (pointed at a
	// closed port). Optional: its case is skipped when nil.
	Down func(t *testing.T) outbox.Publisher
	// PublishTimeout is the ctx deadline of Publish calls expected to fail.
	// Default: DefaultPublishTimeout (2 s).
	PublishTimeout time.Duration
	// RecoverTimeout bounds how long a publisher may take to work again after
	// Restore. Default: DefaultRecoverTimeout (30 s).
	RecoverTimeout time.Duration
}

// Run runs the conformance suite against h as CamelCase subtests of t, each
// with t.Parallel(). Every publisher adapter runs it against its real broker.
func Run(t *testing.T, f Features, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("publishertest: Harness.New is required")
	}
	if h.PublishTimeout <= 0 {
		h.PublishTimeout = DefaultPublishTimeout
	}
	if h.RecoverTimeout <= 0 {
		h.RecoverTimeout = DefaultRecoverTimeout
	}
	s := &suite{f: f, h: h}
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"OneResultPerMessage", s.oneResultPerMessage},
		{"MessageArrivesIntact", s.messageArrivesIntact},
		{"BinaryPayloadAndContentType", s.binaryPayload},
		{"OrderPerKey", s.orderPerKey},
		{"ResendIsConfirmed", s.resendIsConfirmed},
		{"LargePayload", s.largePayload},
		{"TooLargePayloadIsPermanent", s.tooLargePayload},
		{"CancelledContext", s.cancelledContext},
		{"ConcurrentPublish", s.concurrentPublish},
		{"BrokerDown", s.brokerDown},
		{"OutageCutAndRestore", s.outageCut},
		{"OutageStallAndRestore", s.outageStall},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}

type suite struct {
	f Features
	h Harness
}

func (s *suite) newDest(t *testing.T) Dest {
	t.Helper()
	d := s.h.New(t)
	require.NotNil(t, d.Publisher, "Harness.New returned no Publisher")
	require.NotNil(t, d.Receiver, "Harness.New returned no Receiver")
	require.NotEmpty(t, d.Topic, "Harness.New returned no Topic")
	return d
}

// --- cases -------------------------------------------------------------------

func (s *suite) oneResultPerMessage(t *testing.T) {
	d := s.newDest(t)
	ctx := t.Context()

	require.Empty(t, d.Publisher.Publish(ctx, nil), "an empty batch returns no results")

	msgs := messages(d.Topic, "agg-1", 25)
	errs := d.Publisher.Publish(ctx, msgs)
	requireAllNil(t, msgs, errs)

	got := receive(t, d.Receiver, len(msgs))
	require.ElementsMatch(t, ids(msgs), receivedIDs(got))
}

func (s *suite) messageArrivesIntact(t *testing.T) {
	d := s.newDest(t)
	ctx := t.Context()

	msgs := []*outbox.Message{
		{
			MessageID: outbox.NewMessageID(), AggregateType: "order", AggregateID: "ord-1",
			EventType: "ORDER_PAID", Topic: d.Topic,
			Payload: []byte(`{"id":"ord-1","amount":{"value":1999,"currency":"EUR"},"note":"caf\u00e9 ☕"}`),
			Headers: map[string]string{
				outbox.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				outbox.HeaderTracestate:  "vendor1=opaque,vendor2=x",
				"x-tenant":               "acme",
			},
		},
		{
			MessageID: "custom-id-" + outbox.NewMessageID()[:8], AggregateType: "customer", AggregateID: "cus-42",
			EventType: "CUSTOMER_RENAMED", Topic: d.Topic,
			Payload: []byte(`["a",1,null,true]`),
		},
		{
			MessageID: outbox.NewMessageID(), AggregateType: "order", AggregateID: "ord-2",
			EventType: "ORDER_CANCELLED", Topic: d.Topic,
			Payload: []byte(`null`),
			Headers: map[string]string{"x-reason": "customer asked"},
		},
	}
	requireAllNil(t, msgs, d.Publisher.Publish(ctx, msgs))

	got := receivedByID(t, msgs, receive(t, d.Receiver, len(msgs)))
	for _, m := range msgs {
		r := got[m.MessageID]
		require.Equal(t, m.Key(), r.Key, "key of %s", m.MessageID)
		require.Equal(t, m.Destination(), r.Topic, "topic of %s", m.MessageID)
		require.Equal(t, string(m.Payload), string(r.Payload), "payload of %s", m.MessageID)
		if s.f.ContentType {
			require.Equal(t, m.MediaType(), r.ContentType, "content type of %s", m.MessageID)
		}
		if !s.f.Headers {
			continue
		}
		for k, v := range m.StandardHeaders() {
			require.Contains(t, r.Headers, k, "header %q of %s", k, m.MessageID)
			require.Equal(t, v, r.Headers[k], "header %q of %s", k, m.MessageID)
		}
	}
}

func (s *suite) binaryPayload(t *testing.T) {
	if !s.f.ContentType {
		t.Skip("the publisher does not carry content types and bytes (Features.ContentType)")
	}
	d := s.newDest(t)
	ctx := t.Context()

	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	msgs := []*outbox.Message{
		{ // a protobuf-like message: field 1 varint 150, field 2 bytes, invalid UTF-8
			MessageID: outbox.NewMessageID(), AggregateType: "order", AggregateID: "ord-bin",
			EventType: "ORDER_PAID", Topic: d.Topic, ContentType: "application/x-protobuf",
			Payload: []byte{0x08, 0x96, 0x01, 0x12, 0x04, 0xff, 0xfe, 0x00, 0xc3},
		},
		{
			MessageID: outbox.NewMessageID(), AggregateType: "order", AggregateID: "ord-bin",
			EventType: "ORDER_PAID", Topic: d.Topic, ContentType: "application/octet-stream",
			Payload: every,
		},
		{
			MessageID: outbox.NewMessageID(), AggregateType: "order", AggregateID: "ord-bin",
			EventType: "ORDER_PAID", Topic: d.Topic, ContentType: "text/plain; charset=utf-8",
			Payload: []byte("plain text, not JSON"),
		},
	}
	requireAllNil(t, msgs, d.Publisher.Publish(ctx, msgs))

	got := receivedByID(t, msgs, receive(t, d.Receiver, len(msgs)))
	for _, m := range msgs {
		r := got[m.MessageID]
		require.Equal(t, m.Payload, r.Payload, "payload of %s", m.MessageID)
		require.Equal(t, m.ContentType, r.ContentType, "content type of %s", m.MessageID)
	}
}

// receivedByID indexes got by message id and requires that every one of
// msgs is among them.
func receivedByID(t *testing.T, msgs []*outbox.Message, got []Received) map[string]Received {
	t.Helper()
	byID := make(map[string]Received, len(got))
	for _, r := range got {
		byID[r.MessageID] = r
	}
	for _, m := range msgs {
		_, ok := byID[m.MessageID]
		require.True(t, ok, "message %s did not arrive (got %v)", m.MessageID, receivedIDs(got))
	}
	return byID
}

func (s *suite) orderPerKey(t *testing.T) {
	if !s.f.OrderedPerKey {
		t.Skip("the broker does not promise order per key (Features.OrderedPerKey)")
	}
	d := s.newDest(t)
	ctx := t.Context()

	const keys, perKey, batch = 3, 30, 10
	var all []*outbox.Message
	for i := range perKey {
		for k := range keys {
			m := message(d.Topic, fmt.Sprintf("key-%d", k), i)
			all = append(all, m)
		}
	}
	// Batches of interleaved keys, one after another, as a relay sends them.
	for i := 0; i < len(all); i += batch {
		b := all[i:min(i+batch, len(all))]
		requireAllNil(t, b, d.Publisher.Publish(ctx, b))
	}

	got := receive(t, d.Receiver, len(all))
	want := make(map[string][]string, keys) // key -> ids in publish order
	for _, m := range all {
		want[m.Key()] = append(want[m.Key()], m.MessageID)
	}
	seen := make(map[string][]string, keys)
	for _, r := range got {
		seen[r.Key] = append(seen[r.Key], r.MessageID)
	}
	for k, ids := range want {
		require.Equal(t, ids, seen[k], "messages of key %s arrived out of publish order", k)
	}
}

func (s *suite) resendIsConfirmed(t *testing.T) {
	d := s.newDest(t)
	ctx := t.Context()

	msgs := messages(d.Topic, "agg-dup", 5)
	requireAllNil(t, msgs, d.Publisher.Publish(ctx, msgs))
	// A relay re-sends after a crash or a lost ack: same ids, new copies.
	resend := make([]*outbox.Message, len(msgs))
	for i, m := range msgs {
		c := *m
		resend[i] = &c
	}
	requireAllNil(t, resend, d.Publisher.Publish(ctx, resend))

	if !s.f.Dedup {
		got := receive(t, d.Receiver, 2*len(msgs))
		require.ElementsMatch(t, append(ids(msgs), ids(msgs)...), receivedIDs(got),
			"without dedup every copy arrives (at least once)")
		return
	}
	// A fresh message after the re-send marks the end: anything before it
	// that repeats an id is a duplicate the broker should have dropped.
	last := messages(d.Topic, "agg-dup", 1)
	requireAllNil(t, last, d.Publisher.Publish(ctx, last))
	got := receiveUntil(t, d.Receiver, last[0].MessageID, 2*len(msgs)+1)
	require.ElementsMatch(t, append(ids(msgs), last[0].MessageID), receivedIDs(got),
		"a re-sent message id reached the consumer twice")
	// A copy the broker let through may also arrive after the marker.
	requireNothingMore(t, d.Receiver, append(ids(msgs), last[0].MessageID), false)
}

func (s *suite) largePayload(t *testing.T) {
	if s.f.MaxPayload <= 0 {
		t.Skip("no payload size to test (Features.MaxPayload)")
	}
	d := s.newDest(t)
	ctx := t.Context()

	msgs := messages(d.Topic, "agg-big", 3)
	msgs[1].Payload = jsonString(s.f.MaxPayload)
	requireAllNil(t, msgs, d.Publisher.Publish(ctx, msgs))

	got := receive(t, d.Receiver, len(msgs))
	for _, r := range got {
		if r.MessageID == msgs[1].MessageID {
			require.Len(t, r.Payload, s.f.MaxPayload)
			require.Equal(t, string(msgs[1].Payload), string(r.Payload))
			return
		}
	}
	t.Fatalf("the %d-byte message did not arrive", s.f.MaxPayload)
}

func (s *suite) tooLargePayload(t *testing.T) {
	if s.f.TooLargePayload <= 0 {
		t.Skip("the broker has no message size limit to test (Features.TooLargePayload)")
	}
	d := s.newDest(t)
	ctx := t.Context()

	msgs := messages(d.Topic, "agg-huge", 3)
	msgs[1].Payload = jsonString(s.f.TooLargePayload)
	errs := d.Publisher.Publish(ctx, msgs)
	require.Len(t, errs, len(msgs))
	require.NoError(t, errs[0], "batch-mate before the large message")
	require.NoError(t, errs[2], "batch-mate after the large message")
	require.Error(t, errs[1], "a %d-byte payload was confirmed", s.f.TooLargePayload)
	require.True(t, outbox.IsPermanent(errs[1]), "too large must be permanent, got %v", errs[1])

	// The refused message must never arrive, neither before its batch-mates
	// nor after them; a batch-mate may arrive twice from a broker without
	// dedup.
	confirmed := []string{msgs[0].MessageID, msgs[2].MessageID}
	receiveAll(t, d.Receiver, confirmed, !s.f.Dedup)
	requireNothingMore(t, d.Receiver, confirmed, !s.f.Dedup)
}

func (s *suite) cancelledContext(t *testing.T) {
	d := s.newDest(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	msgs := messages(d.Topic, "agg-cancel", 4)
	start := time.Now()
	errs := d.Publisher.Publish(ctx, msgs)
	require.Less(t, time.Since(start), slack, "Publish ignored a cancelled ctx")
	require.Len(t, errs, len(msgs))
	for i, err := range errs {
		require.Error(t, err, "message %d confirmed with a cancelled ctx", i)
		require.False(t, outbox.IsPermanent(err), "a cancelled ctx must not kill a message: %v", err)
	}

	// The publisher is still usable.
	ok := messages(d.Topic, "agg-cancel", 1)
	requireAllNil(t, ok, d.Publisher.Publish(t.Context(), ok))
	receiveUntil(t, d.Receiver, ok[0].MessageID, len(msgs)+1)
}

func (s *suite) concurrentPublish(t *testing.T) {
	d := s.newDest(t)
	ctx := t.Context()

	const workers, batches, size = 8, 4, 5
	var (
		mu   sync.Mutex
		sent []string
		wg   sync.WaitGroup
		bad  []error
	)
	for w := range workers {
		wg.Go(func() {
			for range batches {
				msgs := messages(d.Topic, fmt.Sprintf("agg-%d", w), size)
				errs := d.Publisher.Publish(ctx, msgs)
				mu.Lock()
				if len(errs) != len(msgs) {
					bad = append(bad, fmt.Errorf("%d results for %d messages", len(errs), len(msgs)))
				}
				for i, err := range errs {
					if err != nil {
						bad = append(bad, fmt.Errorf("message %d: %w", i, err))
					}
				}
				sent = append(sent, ids(msgs)...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, bad)

	got := receive(t, d.Receiver, len(sent))
	require.ElementsMatch(t, sent, receivedIDs(got))
}

func (s *suite) brokerDown(t *testing.T) {
	if s.h.Down == nil {
		t.Skip("no publisher to a closed port (Harness.Down)")
	}
	p := s.h.Down(t)
	require.NotNil(t, p, "Harness.Down returned nil")
	msgs := messages("down", "agg-down", 3)
	s.requireFailsFast(t, p, msgs, true)
	s.requirePingFails(t, p)
}

func (s *suite) outageCut(t *testing.T) {
	if s.h.Outage == nil {
		t.Skip("no breakable connection (Harness.Outage)")
	}
	o := s.outageDest(t)
	s.warmUp(t, o)

	o.Cut()
	s.requireFailsFast(t, o.Publisher, messages(o.Topic, "agg-cut", 3), true)
	s.requirePingFails(t, o.Publisher)

	o.Restore()
	s.requireRecovers(t, o)
}

func (s *suite) outageStall(t *testing.T) {
	if s.h.Outage == nil {
		t.Skip("no breakable connection (Harness.Outage)")
	}
	o := s.outageDest(t)
	if o.Stall == nil {
		t.Skip("the harness cannot stall the broker (OutageDest.Stall)")
	}
	s.warmUp(t, o)

	o.Stall()
	// A silent broker may be reported as unavailable or as a timeout (the
	// relay counts a batch that timed out as a whole as unavailable).
	s.requireFailsFast(t, o.Publisher, messages(o.Topic, "agg-stall", 3), false)

	o.Restore()
	s.requireRecovers(t, o)
}

// --- shared checks -------------------------------------------------------------

func (s *suite) outageDest(t *testing.T) OutageDest {
	t.Helper()
	o := s.h.Outage(t)
	require.NotNil(t, o.Publisher, "Harness.Outage returned no Publisher")
	require.NotNil(t, o.Receiver, "Harness.Outage returned no Receiver")
	require.NotEmpty(t, o.Topic, "Harness.Outage returned no Topic")
	require.NotNil(t, o.Cut, "Harness.Outage returned no Cut")
	require.NotNil(t, o.Restore, "Harness.Outage returned no Restore")
	return o
}

// warmUp proves the destination works before it is broken.
func (s *suite) warmUp(t *testing.T, o OutageDest) {
	t.Helper()
	msgs := messages(o.Topic, "agg-warm", 1)
	requireAllNil(t, msgs, o.Publisher.Publish(t.Context(), msgs))
	require.ElementsMatch(t, ids(msgs), receivedIDs(receive(t, o.Receiver, 1)))
	if p, ok := o.Publisher.(outbox.Pinger); ok {
		ctx, cancel := context.WithTimeout(t.Context(), s.h.PublishTimeout)
		defer cancel()
		require.NoError(t, p.Ping(ctx), "Ping of a healthy broker")
	}
}

// requireFailsFast publishes msgs to a broken broker and requires one error
// per message within the publish timeout, none permanent, each classified
// unavailable (or, when strict is false, unavailable or a deadline).
func (s *suite) requireFailsFast(t *testing.T, p outbox.Publisher, msgs []*outbox.Message, strict bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), s.h.PublishTimeout)
	defer cancel()
	start := time.Now()
	errs := p.Publish(ctx, msgs)
	took := time.Since(start)
	require.LessOrEqual(t, took, s.h.PublishTimeout+slack, "Publish hung past its ctx deadline")
	require.Len(t, errs, len(msgs))
	for i, err := range errs {
		require.Error(t, err, "message %d confirmed by a broker that is down", i)
		require.False(t, outbox.IsPermanent(err), "an outage must not kill a message: %v", err)
		if strict {
			require.True(t, outbox.IsUnavailable(err), "message %d: want outbox.Unavailable, got %v", i, err)
		} else {
			require.True(t, outbox.IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded),
				"message %d: want outbox.Unavailable or a deadline, got %v", i, err)
		}
	}
}

// requirePingFails checks a Pinger reports a broken broker within the timeout.
func (s *suite) requirePingFails(t *testing.T, p outbox.Publisher) {
	t.Helper()
	pg, ok := p.(outbox.Pinger)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), s.h.PublishTimeout)
	defer cancel()
	start := time.Now()
	require.Error(t, pg.Ping(ctx), "Ping of a broker that is down")
	require.LessOrEqual(t, time.Since(start), s.h.PublishTimeout+slack, "Ping hung past its ctx deadline")
}

// requireRecovers publishes with the same publisher until a message is
// confirmed, then requires it to arrive.
func (s *suite) requireRecovers(t *testing.T, o OutageDest) {
	t.Helper()
	deadline := time.Now().Add(s.h.RecoverTimeout)
	var last []error
	for {
		msgs := messages(o.Topic, "agg-back", 1)
		ctx, cancel := context.WithTimeout(t.Context(), s.h.PublishTimeout)
		last = o.Publisher.Publish(ctx, msgs)
		cancel()
		require.Len(t, last, 1)
		if last[0] == nil {
			// Messages sent during the outage may arrive too (at least once);
			// this one must.
			receiveUntil(t, o.Receiver, msgs[0].MessageID, 100)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publisher did not recover within %v after Restore: %v", s.h.RecoverTimeout, last[0])
		}
		wait := time.NewTimer(100 * time.Millisecond)
		select {
		case <-t.Context().Done():
			wait.Stop()
			t.Fatal("test ended while waiting for recovery")
		case <-wait.C:
		}
	}
	if p, ok := o.Publisher.(outbox.Pinger); ok {
		ctx, cancel := context.WithTimeout(t.Context(), s.h.PublishTimeout)
		defer cancel()
		require.NoError(t, p.Ping(ctx), "Ping after recovery")
	}
}

// --- helpers -------------------------------------------------------------------

func testCtx(t *testing.T) context.Context { return t.Context() }

// message returns message seq of key on topic, with a payload naming both.
func message(topic, key string, seq int) *outbox.Message {
	return &outbox.Message{
		MessageID:     outbox.NewMessageID(),
		AggregateType: "order",
		AggregateID:   key,
		EventType:     "ORDER_PAID",
		Topic:         topic,
		Payload:       fmt.Appendf(nil, `{"key":%q,"seq":%d}`, key, seq),
		Headers:       map[string]string{"x-seq": fmt.Sprint(seq)},
	}
}

func messages(topic, key string, n int) []*outbox.Message {
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = message(topic, key, i)
	}
	return msgs
}

// jsonString returns a valid JSON payload of exactly n bytes (n >= 2).
func jsonString(n int) []byte {
	return []byte(`"` + strings.Repeat("x", max(n-2, 0)) + `"`)
}

func ids(msgs []*outbox.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.MessageID
	}
	return out
}

func receivedIDs(rs []Received) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.MessageID
	}
	return out
}

func requireAllNil(t *testing.T, msgs []*outbox.Message, errs []error) {
	t.Helper()
	require.Len(t, errs, len(msgs), "Publish must return one result per message")
	for i, err := range errs {
		require.NoError(t, err, "message %d (%s)", i, msgs[i].MessageID)
	}
}

// receive waits for exactly n messages.
func receive(t *testing.T, r Receiver, n int) []Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), DefaultReceiveTimeout)
	defer cancel()
	got, err := r.Receive(ctx, n)
	require.NoError(t, err, "received %d of %d messages", len(got), n)
	require.Len(t, got, n)
	return got
}

// receiveUntil reads one message at a time until id arrives, at most limit
// messages, and returns all it read.
func receiveUntil(t *testing.T, r Receiver, id string, limit int) []Received {
	t.Helper()
	var got []Received
	for len(got) < limit {
		one := receive(t, r, 1)
		got = append(got, one...)
		if one[0].MessageID == id {
			return got
		}
	}
	t.Fatalf("message %s not among the first %d received: %v", id, limit, receivedIDs(got))
	return nil
}

// receiveAll reads one message at a time until every id in confirmed has
// arrived, and returns all it read. It fails on a message not in confirmed
// (one the broker refused, or that was never sent) and, unless mayRepeat, on
// a confirmed one arriving a second time.
func receiveAll(t *testing.T, r Receiver, confirmed []string, mayRepeat bool) []Received {
	t.Helper()
	missing := make(map[string]bool, len(confirmed))
	for _, id := range confirmed {
		missing[id] = true
	}
	seen := make(map[string]bool, len(confirmed))
	var got []Received
	for len(missing) > 0 {
		one := receive(t, r, 1)[0]
		requireExpected(t, one.MessageID, confirmed, seen, mayRepeat)
		delete(missing, one.MessageID)
		got = append(got, one)
	}
	return got
}

// requireNothingMore reads what arrives in the quiet period after the
// suite received everything it waited for: a message not in confirmed (one
// the broker refused, or a stranger) fails at any time, and a confirmed one
// arriving again fails unless mayRepeat (a broker without dedup may deliver
// a message more than once: at least once). It reads until the period ends,
// not just the first message, and does not mind how the Receiver words the
// end of its ctx: nothing arriving is what passes.
func requireNothingMore(t *testing.T, r Receiver, confirmed []string, mayRepeat bool) {
	t.Helper()
	seen := make(map[string]bool, len(confirmed))
	for _, id := range confirmed {
		seen[id] = true // all of them arrived before the quiet period
	}
	ctx, cancel := context.WithTimeout(t.Context(), quiet)
	defer cancel()
	for {
		got, err := r.Receive(ctx, 1)
		for _, m := range got {
			requireExpected(t, m.MessageID, confirmed, seen, mayRepeat)
		}
		if ctx.Err() != nil {
			return
		}
		require.NoError(t, err, "receive during the quiet period")
	}
}

// requireExpected checks one arrival: its id must be in confirmed, and
// unless mayRepeat not in seen; it then marks it seen.
func requireExpected(t *testing.T, id string, confirmed []string, seen map[string]bool, mayRepeat bool) {
	t.Helper()
	require.True(t, slices.Contains(confirmed, id),
		"message %s arrived but was never confirmed (refused by the broker, or not sent by this test); want only %v", id, confirmed)
	require.True(t, mayRepeat || !seen[id],
		"message %s arrived twice from a broker that promises dedup (Features.Dedup)", id)
	seen[id] = true
}
