package tracing

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxkit/outbox"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the spans this package starts.
const ScopeName = "github.com/outboxkit/outbox/tracing"

// Attribute keys of the outbox's own span attributes (the messaging.* ones
// follow the OpenTelemetry semantic conventions).
const (
	AttrEventType     = attribute.Key("outbox.event_type")
	AttrAggregateType = attribute.Key("outbox.aggregate_type")
	AttrAttempt       = attribute.Key("outbox.attempt")
)

type config struct {
	system     string
	newTrace   bool
	propagator propagation.TextMapPropagator
}

// Option configures [WrapPublisher].
type Option func(*config)

// WithSystem sets the messaging.system attribute of every span, e.g. "kafka",
// "nats", "rabbitmq". Default: none.
func WithSystem(name string) Option { return func(c *config) { c.system = name } }

// WithNewTrace makes each publish span the root of a new trace that links to
// the context recorded at write time, instead of its child. Use it when the
// writing request's traces must stay short (a message may be published long
// after its request, after retries). Default: false (child of the recorded
// context, so request, publish and consumer share one trace).
func WithNewTrace(on bool) Option { return func(c *config) { c.newTrace = on } }

// WithPropagator sets how the trace context is read from and written to
// message headers. Default: propagation.TraceContext (W3C traceparent and
// tracestate, the headers outbox.Writer records). Whatever else p carries,
// such as baggage, passes from the recorded headers to the broker's copy.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.propagator = p }
}

// WrapPublisher returns a Publisher that traces every message it publishes
// through pub. For each message it reads the trace context recorded at write
// time from the message's headers (traceparent, tracestate), starts a
// producer span named "publish <destination>" that is a child of that context
// (see [WithNewTrace]) and links to it, and hands pub a copy of the message
// whose headers carry the new span's context, so consumers continue the
// trace. The caller's messages are never modified. Each span ends with the
// message's result: an error sets the span's status to Error and its
// error.type to permanent, unavailable, timeout or transient.
//
// A message with no recorded context gets a span too, the child of whatever
// span ctx carries (usually none: a new root). The wrapper implements
// outbox.Pinger exactly when pub does, so the relay's probing is unchanged;
// Unwrap returns pub. With a no-op TracerProvider (the default of [Setup])
// the headers pass through unchanged. It panics if pub or tp is nil, a
// programmer error. It is safe for concurrent use when pub is.
func WrapPublisher(pub outbox.Publisher, tp trace.TracerProvider, opts ...Option) outbox.Publisher {
	if pub == nil || tp == nil {
		panic("tracing: WrapPublisher with a nil Publisher or TracerProvider")
	}
	cfg := config{propagator: propagation.TraceContext{}}
	for _, o := range opts {
		o(&cfg)
	}
	p := &tracedPublisher{pub: pub, cfg: cfg, tracer: tp.Tracer(ScopeName)}
	if pinger, ok := pub.(outbox.Pinger); ok {
		return &tracedPingPublisher{tracedPublisher: p, ping: pinger}
	}
	return p
}

type tracedPublisher struct {
	pub    outbox.Publisher
	cfg    config
	tracer trace.Tracer
}

func (p *tracedPublisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	spans := make([]trace.Span, len(msgs))
	out := make([]*outbox.Message, len(msgs))
	for i, m := range msgs {
		out[i], spans[i] = p.start(ctx, m)
	}
	errs := p.pub.Publish(ctx, out)
	for i, span := range spans {
		var err error
		switch {
		case len(errs) != len(msgs):
			err = fmt.Errorf("publisher returned %d results for %d messages", len(errs), len(msgs))
		default:
			err = errs[i]
		}
		end(span, err)
	}
	return errs
}

// start begins m's span and returns a copy of m that carries the span's context.
func (p *tracedPublisher) start(ctx context.Context, m *outbox.Message) (*outbox.Message, trace.Span) {
	carrier := propagation.MapCarrier(m.Headers)
	recorded := trace.SpanContextFromContext(p.cfg.propagator.Extract(context.Background(), carrier))
	dest := m.Destination()
	attrs := []attribute.KeyValue{
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("publish"),
		semconv.MessagingDestinationName(dest),
		semconv.MessagingMessageID(m.MessageID),
		semconv.MessagingMessageBodySize(len(m.Payload)),
		AttrEventType.String(m.EventType),
		AttrAggregateType.String(m.AggregateType),
		AttrAttempt.Int(m.Attempt),
	}
	if p.cfg.system != "" {
		attrs = append(attrs, semconv.MessagingSystemKey.String(p.cfg.system))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...)}
	// Whatever else the propagator carries (baggage) travels on in the new context.
	parent := p.cfg.propagator.Extract(ctx, carrier)
	if recorded.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: recorded}))
		if p.cfg.newTrace {
			opts = append(opts, trace.WithNewRoot())
		}
	}
	sctx, span := p.tracer.Start(parent, "publish "+dest, opts...)

	c := *m
	c.Headers = make(map[string]string, len(m.Headers)+2)
	for k, v := range m.Headers {
		c.Headers[k] = v
	}
	for _, k := range p.cfg.propagator.Fields() {
		delete(c.Headers, k) // the recorded context is replaced, never left half in place
	}
	p.cfg.propagator.Inject(sctx, propagation.MapCarrier(c.Headers))
	if !trace.SpanContextFromContext(sctx).IsValid() {
		// A no-op provider started no span: pass the recorded context through as it was.
		for _, k := range p.cfg.propagator.Fields() {
			if v, ok := m.Headers[k]; ok {
				c.Headers[k] = v
			}
		}
	}
	return &c, span
}

// end closes span with the result of its message.
func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(semconv.ErrorTypeKey.String(errorClass(err)))
	}
	span.End()
}

// errorClass names the kind of failure with a bounded value, for error.type.
func errorClass(err error) string {
	switch {
	case outbox.IsPermanent(err):
		return "permanent"
	case outbox.IsUnavailable(err):
		return "unavailable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "transient"
}

// Unwrap returns the wrapped publisher.
func (p *tracedPublisher) Unwrap() outbox.Publisher { return p.pub }

type tracedPingPublisher struct {
	*tracedPublisher
	ping outbox.Pinger
}

func (p *tracedPingPublisher) Ping(ctx context.Context) error { return p.ping.Ping(ctx) }
