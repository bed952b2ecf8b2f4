package natspub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
)

// Publisher sends outbox messages to NATS JetStream through a client the
// caller built. It is safe for concurrent use and never closes the client.
type Publisher struct {
	js  jetstream.JetStream
	nc  *nats.Conn
	cfg config
}

var (
	_ outbox.Publisher = (*Publisher)(nil)
	_ outbox.Pinger    = (*Publisher)(nil)
)

type config struct {
	subjectPrefix string
	pingStreams   []string
}

func defaultConfig() config { return config{} }

func (c *config) validate() error {
	var errs []error
	if c.subjectPrefix != "" {
		// A prefix may end with "." (the usual "orders."); the rest must be
		// literal tokens.
		if err := validSubject(strings.TrimSuffix(c.subjectPrefix, ".")); err != nil {
			errs = append(errs, fmt.Errorf("WithSubjectPrefix: %q: %w", c.subjectPrefix, err))
		}
	}
	return errors.Join(errs...)
}

// Option configures a [Publisher].
type Option func(*config)

// WithSubjectPrefix puts prefix in front of every message's destination
// ([outbox.Message.Destination]: its Topic, else its EventType) to make the
// subject, e.g. "outbox." + "ORDER_PAID". Default: "" (the destination as is).
func WithSubjectPrefix(prefix string) Option {
	return func(c *config) { c.subjectPrefix = prefix }
}

// WithPingStreams makes Ping also check that each named stream exists, so a
// deleted or renamed stream counts as the destination being down (the relay
// pauses and keeps the messages' attempts) rather than as a refusal of each
// message. Default: none (Ping checks the connection and JetStream only).
func WithPingStreams(names ...string) Option {
	return func(c *config) { c.pingStreams = append(c.pingStreams, names...) }
}

// New returns a Publisher that publishes through js, which the caller built
// (jetstream.New over a *nats.Conn) and closes. A stream must capture the
// subjects the publisher uses ([EnsureStream] makes one), with a duplicate
// window longer than the relay's lease plus its longest backoff, so that a
// re-send after a crash is dropped by the server.
//
// Give the connection a reconnect policy (nats.MaxReconnects(-1) and a short
// nats.ReconnectWait) so that it comes back after an outage on its own, and
// consider jetstream.WithPublishAsyncTimeout so that acks lost to a silent
// server free their slot. New panics if js is nil, a programmer error.
func New(js jetstream.JetStream, opts ...Option) (*Publisher, error) {
	if js == nil {
		panic("natspub: New with a nil JetStream")
	}
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("natspub: new publisher: %w", err)
	}
	nc := js.Conn()
	if nc == nil {
		return nil, errors.New("natspub: new publisher: JetStream has no connection")
	}
	return &Publisher{js: js, nc: nc, cfg: cfg}, nil
}

// Subject returns the subject m is published to: the prefix plus m's destination.
func (p *Publisher) Subject(m *outbox.Message) string { return p.cfg.subjectPrefix + m.Destination() }

// Publish sends every message asynchronously and waits, within ctx, for each
// one's acknowledgement from the stream. It returns one error per message,
// in order: nil when the stream stored the message, or already had it (a
// duplicate within the stream's window is dropped and confirmed).
//
// Each message carries its MessageID as Nats-Msg-Id, the payload as data,
// and [outbox.Message.StandardHeaders] as headers (message id, aggregate
// type and id, event type, traceparent and tracestate when set, and the
// caller's own).
//
// Errors: a message the server refuses as such (over the server's max
// payload or the stream's max message size, an invalid subject or header
// name) is [outbox.Permanent]; a connection that is closed or not connected,
// and a subject no stream captures (no responders, a misconfiguration that
// hits every message), are [outbox.Unavailable], the latter also
// [outbox.Unroutable]; a message still
// unacknowledged when ctx ends gets an error wrapping ctx.Err(), marked
// Unavailable when the connection is down by then. Such a message may still
// be stored later; its id lets the stream or the consumer drop the copy.
func (p *Publisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	if len(msgs) == 0 {
		return []error{}
	}
	if err := ctx.Err(); err != nil {
		return outbox.ErrorsFor(len(msgs), fmt.Errorf("natspub: publish: %w", err))
	}
	if s := p.nc.Status(); s != nats.CONNECTED {
		return outbox.ErrorsFor(len(msgs), outbox.Unavailable(fmt.Errorf("natspub: publish: connection is %s", s)))
	}

	// When the client already holds its maximum of unacknowledged messages,
	// PublishMsgAsync waits for a free slot; never longer than ctx allows.
	stall := 200 * time.Millisecond
	if deadline, ok := ctx.Deadline(); ok {
		stall = max(time.Until(deadline), time.Millisecond)
	}
	opts := []jetstream.PublishOpt{jetstream.WithStallWait(stall)}
	errs := make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	b := batch{prefix: p.cfg.subjectPrefix}
	for i, m := range msgs {
		msg, err := b.natsMsg(m)
		if err != nil {
			errs[i] = err
			continue
		}
		f, err := p.js.PublishMsgAsync(msg, opts...)
		if err != nil {
			errs[i] = classify(err)
			continue
		}
		futures[i] = f
	}

	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = classify(err)
		case <-ctx.Done():
			p.expire(ctx, futures[i:], errs[i:])
			return errs
		}
	}
	return errs
}

// expire settles the futures still open when ctx ended: those answered by
// now keep their answer, the others get a timeout error.
func (p *Publisher) expire(ctx context.Context, futures []jetstream.PubAckFuture, errs []error) {
	timeout := fmt.Errorf("natspub: no ack before the publish ended: %w", ctx.Err())
	if s := p.nc.Status(); s != nats.CONNECTED {
		timeout = outbox.Unavailable(fmt.Errorf("natspub: no ack before the publish ended, connection is %s: %w", s, ctx.Err()))
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = classify(err)
		default:
			errs[i] = timeout
		}
	}
}

// batch builds the NATS messages of one Publish call. The subject of a run
// of messages with the same destination is made and checked once.
type batch struct {
	prefix  string
	dest    string // destination of the last subject made
	subject string // prefix + dest
	subErr  error  // why subject is invalid, or nil
	hasDest bool   // dest, subject and subErr are set
}

// msgBuf is a NATS message with room for the values of its usual headers
// (the standard ones, Nats-Msg-Id and two of the caller's, such as the trace
// context), so that they take one allocation. Each message has its own: the
// client holds on to a message until its ack comes, and must not hold its
// batch-mates with it.
type msgBuf struct {
	msg  nats.Msg
	vals [9]string
}

// HeaderContentType is the NATS header that carries the payload's media type
// ([outbox.Message.MediaType]: application/json unless the message sets one).
// It replaces a caller's header of the same name.
const HeaderContentType = "Content-Type"

// natsMsg builds the NATS message for m, or a permanent error. Its headers
// are m's [outbox.Message.StandardHeaders] and, when m has a MessageID,
// Nats-Msg-Id (what jetstream.WithMsgID would set).
func (b *batch) natsMsg(m *outbox.Message) (*nats.Msg, error) {
	if m == nil {
		return nil, outbox.Permanent(errors.New("natspub: nil message"))
	}
	subject, err := b.subjectOf(m)
	if err != nil {
		return nil, err
	}
	for k := range m.Headers { // the standard names are valid
		if !validHeaderName(k) {
			return nil, outbox.Permanent(fmt.Errorf("natspub: header name %q is not printable ASCII without spaces and %s",
				k, headerForbidden))
		}
	}
	buf := new(msgBuf)
	n := len(m.Headers) + 7 // at most this many: the caller's, 5 standard, Nats-Msg-Id, Content-Type
	vals := buf.vals[:]
	if n > len(vals) {
		vals = make([]string, n)
	}
	hdr := make(nats.Header, n)
	// Each value is a slice of vals with a capacity of one, so that an
	// append to it cannot overwrite the next.
	for k, v := range m.StandardHeadersSeq() {
		vals[0] = v
		hdr[k], vals = vals[:1:1], vals[1:]
	}
	if m.MessageID != "" {
		vals[0] = m.MessageID
		hdr[jetstream.MsgIDHeader], vals = vals[:1:1], vals[1:]
	}
	vals[0] = m.MediaType()
	hdr[HeaderContentType] = vals[:1:1]
	buf.msg = nats.Msg{Subject: subject, Data: m.Payload, Header: hdr}
	return &buf.msg, nil
}

// subjectOf returns the subject of m, checked.
func (b *batch) subjectOf(m *outbox.Message) (string, error) {
	dest := m.Destination()
	if !b.hasDest || dest != b.dest {
		b.dest, b.subject, b.hasDest = dest, b.prefix+dest, true
		b.subErr = nil
		if err := validSubject(b.subject); err != nil {
			b.subErr = outbox.Permanent(fmt.Errorf("natspub: subject %q: %w", b.subject, err))
		}
	}
	return b.subject, b.subErr
}

// classify marks a publish error with the class the relay acts on.
func classify(err error) error {
	wrapped := fmt.Errorf("natspub: publish: %w", err)
	switch {
	case errors.Is(err, nats.ErrMaxPayload),
		errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum),
		errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrBadHeaderMsg):
		return outbox.Permanent(wrapped)
	case errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse):
		// No stream for the subject yet: marked Unroutable too, so that a
		// route that wants such a message dead can say so.
		return outbox.Unavailable(outbox.Unroutable(wrapped))
	case errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrReconnectBufExceeded),
		errors.Is(err, nats.ErrInvalidConnection),
		errors.Is(err, nats.ErrHeadersNotSupported),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return outbox.Unavailable(wrapped)
	}
	return wrapped
}

// Ping returns nil when the connection is CONNECTED and JetStream answers an
// account info request within ctx; otherwise an error (marked
// [outbox.Unavailable] when the connection is down).
func (p *Publisher) Ping(ctx context.Context) error {
	if s := p.nc.Status(); s != nats.CONNECTED {
		return outbox.Unavailable(fmt.Errorf("natspub: ping: connection is %s", s))
	}
	if _, err := p.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("natspub: ping: %w", err)
	}
	for _, name := range p.cfg.pingStreams {
		if _, err := p.js.Stream(ctx, name); err != nil {
			return outbox.Unavailable(fmt.Errorf("natspub: ping: stream %q: %w", name, err))
		}
	}
	return nil
}

// validSubject checks that s is a subject a message can be published to:
// non-empty dot-separated tokens, no whitespace, no wildcard token.
func validSubject(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return errors.New("contains whitespace")
	}
	for tok := range strings.SplitSeq(s, ".") {
		switch tok {
		case "":
			return errors.New("has an empty token")
		case "*", ">":
			return errors.New("has a wildcard token")
		}
	}
	return nil
}

// headerForbidden are the printable characters the NATS client refuses in a
// header name.
const headerForbidden = `"()/,:;<=>?@[\]{}`

// validHeaderName reports whether k can be a NATS header name: printable
// ASCII without space and headerForbidden, as the client requires.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := range len(k) {
		if !headerNameByte[k[i]] {
			return false
		}
	}
	return true
}

// headerNameByte tells the bytes validHeaderName accepts.
var headerNameByte = func() (ok [256]bool) {
	for c := '!'; c < 0x7f; c++ {
		ok[c] = !strings.ContainsRune(headerForbidden, c)
	}
	return ok
}()
