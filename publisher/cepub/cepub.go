package cepub

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
)

// SpecVersion is the CloudEvents version of every event: 1.0.
const SpecVersion = "1.0"

// ContentTypeStructured is the content type of a structured-mode event.
const ContentTypeStructured = "application/cloudevents+json"

// Extension attributes the Publisher sets besides the required ones.
const (
	// ExtAggregateType is the message's aggregate type.
	ExtAggregateType = "aggregatetype"
	// ExtPartitionKey is the message's partition key (the Partitioning
	// extension): its PartitionKey, else its aggregate id.
	ExtPartitionKey = "partitionkey"
	// ExtTraceparent and ExtTracestate are the Distributed Tracing
	// extension, copied from the message's W3C trace context when it has one.
	ExtTraceparent = "traceparent"
	ExtTracestate  = "tracestate"
)

// Mode is how an event is laid on a message: its attributes in headers
// (binary) or the whole event as a JSON payload (structured).
type Mode int

const (
	// Binary keeps the payload as the event's data, the message's content
	// type as datacontenttype, and puts every other attribute in the
	// binding's headers.
	Binary Mode = iota + 1
	// Structured makes the payload a JSON event (application/cloudevents+json)
	// that holds every attribute, and the data as "data" (a JSON payload)
	// or "data_base64" (any other).
	Structured
)

// String returns binary or structured.
func (m Mode) String() string {
	switch m {
	case Binary:
		return "binary"
	case Structured:
		return "structured"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Binding is the CloudEvents protocol binding of the broker behind the
// inner publisher: it names the headers of binary mode.
type Binding int

const (
	// HTTP: ce- headers (webhookpub with WithRawBody).
	HTTP Binding = iota + 1
	// Kafka: ce_ headers, the content-type header (kafkapub).
	Kafka
	// AMQP: cloudEvents: application properties, the content-type
	// property (amqppub's headers table).
	AMQP
	// NATS: ce- headers (natspub), and a content-type header besides
	// natspub's Content-Type.
	NATS
	// MQTT: structured mode only. Binary mode needs MQTT 5 user
	// properties, and mqttpub speaks MQTT 3.1.1, for which the MQTT binding
	// allows structured mode alone (mqttpub with WithRawPayload).
	MQTT
	// None: a broker without a binding (Redis); structured mode only.
	None
)

// String returns the binding's name in lower case.
func (b Binding) String() string {
	switch b {
	case HTTP:
		return "http"
	case Kafka:
		return "kafka"
	case AMQP:
		return "amqp"
	case NATS:
		return "nats"
	case MQTT:
		return "mqtt"
	case None:
		return "none"
	}
	return "binding(" + strconv.Itoa(int(b)) + ")"
}

// Prefix returns the prefix of an attribute's header in binary mode: "ce-",
// "ce_", "cloudEvents:", or "" for a binding without binary mode.
func (b Binding) Prefix() string {
	switch b {
	case HTTP, NATS:
		return "ce-"
	case Kafka:
		return "ce_"
	case AMQP:
		return "cloudEvents:"
	}
	return ""
}

// Binary reports whether the binding has a binary mode the Publisher can use.
func (b Binding) Binary() bool { return b.Prefix() != "" }

// Publisher renders every message as a CloudEvent and hands it to the
// inner publisher. It is safe for concurrent use when the inner one is.
type Publisher struct {
	inner   outbox.Publisher
	binding Binding
	source  string
	mode    Mode
}

var (
	_ outbox.Publisher = (*Publisher)(nil)
	_ outbox.Pinger    = (*Publisher)(nil)
)

// Option configures a [Publisher].
type Option func(*Publisher)

// WithMode sets the mode. Default: Binary, or Structured for a binding
// without binary mode (MQTT, None).
func WithMode(m Mode) Option { return func(p *Publisher) { p.mode = m } }

// New returns a Publisher that renders each message as a CloudEvent with
// the given source (a URI-reference, e.g. "/outbox/outbox_message") and
// publishes it through inner, whose broker has binding b. The inner
// publisher must send payloads as they are: webhookpub with WithRawBody,
// mqttpub with WithRawPayload; kafkapub, amqppub, natspub and redispub do.
// Binary mode on a binding without it, an empty source or an unknown mode
// is an error. New panics if inner is nil, a programmer error.
func New(inner outbox.Publisher, b Binding, source string, opts ...Option) (*Publisher, error) {
	if inner == nil {
		panic("cepub: New with a nil publisher")
	}
	p := &Publisher{inner: inner, binding: b, source: source, mode: Binary}
	if !b.Binary() {
		p.mode = Structured
	}
	for _, opt := range opts {
		opt(p)
	}
	var errs []error
	if b < HTTP || b > None {
		errs = append(errs, fmt.Errorf("binding: %v is not one of the package's", b))
	}
	if source == "" {
		errs = append(errs, errors.New("source: is empty (CloudEvents requires one)"))
	}
	switch {
	case p.mode != Binary && p.mode != Structured:
		errs = append(errs, fmt.Errorf("WithMode: %v is not Binary or Structured", p.mode))
	case p.mode == Binary && !b.Binary():
		errs = append(errs, fmt.Errorf("WithMode: the %v binding has no binary mode here: use Structured", b))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("cepub: new publisher: %w", err)
	}
	return p, nil
}

// Publish renders the messages as CloudEvents and publishes them through
// the inner publisher, returning one error per message, in order. The
// messages themselves are not changed. A message that cannot be an event
// (no id or type, a JSON content type whose payload is not JSON) fails
// alone with [outbox.Permanent] and is not handed on.
func (p *Publisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	out := make([]*outbox.Message, 0, len(msgs))
	at := make([]int, 0, len(msgs)) // index in msgs of each of out
	for i, m := range msgs {
		e, err := p.Event(m)
		if err != nil {
			errs[i] = err
			continue
		}
		out = append(out, e)
		at = append(at, i)
	}
	if len(out) == 0 {
		return errs
	}
	for j, err := range p.inner.Publish(ctx, out) {
		errs[at[j]] = err
	}
	return errs
}

// Ping checks the inner publisher when it can be pinged, and returns nil
// when it cannot.
func (p *Publisher) Ping(ctx context.Context) error {
	if pg, ok := p.inner.(outbox.Pinger); ok {
		return pg.Ping(ctx)
	}
	return nil
}

// Event returns the message that carries m as a CloudEvent in the
// Publisher's mode: a copy of m with the binding's headers added (binary),
// or with the event as its payload and [ContentTypeStructured] as its
// content type (structured). m is not changed.
func (p *Publisher) Event(m *outbox.Message) (*outbox.Message, error) {
	switch {
	case m == nil:
		return nil, outbox.Permanent(errors.New("cepub: nil message"))
	case m.MessageID == "" || m.EventType == "":
		return nil, outbox.Permanent(errors.New("cepub: a message without an id or an event type cannot be a CloudEvent"))
	case m.JSONPayload() && !json.Valid(m.Payload):
		return nil, outbox.Permanent(fmt.Errorf("cepub: payload is not valid JSON, which content type %s requires", m.MediaType()))
	}
	c := *m
	attrs := p.attributes(m)
	if p.mode == Structured {
		c.Payload = structured(m, attrs)
		c.ContentType = ContentTypeStructured
		return &c, nil
	}
	c.Headers = make(map[string]string, len(m.Headers)+len(attrs)+1)
	for k, v := range m.Headers {
		c.Headers[k] = v
	}
	prefix := p.binding.Prefix()
	for _, a := range attrs {
		c.Headers[prefix+a.name] = a.value
	}
	if p.binding == NATS {
		// The NATS binding names the header content-type; natspub's own is
		// Content-Type, and NATS headers are case-sensitive.
		c.Headers["content-type"] = m.MediaType()
	}
	return &c, nil
}

type attribute struct{ name, value string }

// attributes returns m's context attributes but datacontenttype, which each
// mode places itself, in a fixed order.
func (p *Publisher) attributes(m *outbox.Message) []attribute {
	attrs := []attribute{
		{"specversion", SpecVersion},
		{"id", m.MessageID},
		{"source", p.source},
		{"type", m.EventType},
	}
	if m.AggregateID != "" {
		attrs = append(attrs, attribute{"subject", m.AggregateID})
	}
	if !m.CreatedAt.IsZero() {
		attrs = append(attrs, attribute{"time", m.CreatedAt.UTC().Format(time.RFC3339Nano)})
	}
	if m.AggregateType != "" {
		attrs = append(attrs, attribute{ExtAggregateType, m.AggregateType})
	}
	if k := m.Key(); k != "" {
		attrs = append(attrs, attribute{ExtPartitionKey, k})
	}
	for _, k := range []string{ExtTraceparent, ExtTracestate} {
		if v := m.Headers[k]; v != "" {
			attrs = append(attrs, attribute{k, v})
		}
	}
	return attrs
}

// structured encodes the JSON event: the attributes, datacontenttype, and
// the payload as data (written as is) or data_base64.
func structured(m *outbox.Message, attrs []attribute) []byte {
	var o envelope.Object
	for _, a := range attrs {
		o.Field(a.name, a.value)
	}
	o.Field("datacontenttype", m.MediaType())
	if m.JSONPayload() {
		o.Raw("data", m.Payload)
	} else {
		o.Field("data_base64", base64.StdEncoding.EncodeToString(m.Payload))
	}
	return o.Bytes()
}
