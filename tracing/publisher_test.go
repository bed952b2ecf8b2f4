package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/publisher/kafkapub"
	"github.com/outboxkit/outbox/store/sqlitestore"
	"github.com/outboxkit/outbox/tracing"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// recorder returns a real SDK tracer provider that samples every span and
// records the ended ones.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// headerContext reads the W3C trace context in headers.
func headerContext(h map[string]string) trace.SpanContext {
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(h)))
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// TestTraceFromWriteToBroker writes messages inside a request's span with the
// real Writer and SQLite store, relays them through the wrapped publisher,
// and follows the trace: the broker's copy carries a new span's context,
// whose span is the request's child and links to it.
func TestTraceFromWriteToBroker(t *testing.T) {
	t.Parallel()
	tp, sr := recorder(t)
	db, err := sqlitestore.Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := sqlitestore.New(db)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, store.Migrate(ctx))

	reqCtx, reqSpan := tp.Tracer("test").Start(ctx, "POST /orders")
	tx, err := db.BeginTx(reqCtx, nil)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter(store).Write(reqCtx, tx,
		&outbox.Message{AggregateType: "order", AggregateID: "1", EventType: "ORDER_PAID", Payload: []byte(`{}`)},
		&outbox.Message{AggregateType: "order", AggregateID: "2", EventType: "ORDER_PAID", Topic: "orders.eu",
			Payload: []byte(`{}`)}))
	require.NoError(t, tx.Commit())
	reqSpan.End()

	pub := outboxtest.NewPublisher()
	relay, err := outbox.NewRelay(store, tracing.WrapPublisher(pub, tp, tracing.WithSystem("nats")))
	require.NoError(t, err)
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sent, err := outboxtest.FlushAndWait(fctx, relay, store)
	require.NoError(t, err)
	require.Equal(t, 2, sent)

	req := reqSpan.SpanContext()
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range sr.Ended() {
		spans[s.Name()] = s
	}
	require.Len(t, spans, 3, "the request and one span per message")
	for _, m := range pub.Messages() {
		s, ok := spans["publish "+m.Destination()]
		require.True(t, ok, "no span for %s", m.Destination())
		require.Equal(t, trace.SpanKindProducer, s.SpanKind())
		require.Equal(t, req.TraceID(), s.SpanContext().TraceID(), "one trace from request to broker")
		require.Equal(t, req.SpanID(), s.Parent().SpanID(), "child of the request's span")
		require.Len(t, s.Links(), 1)
		require.Equal(t, req.SpanID(), s.Links()[0].SpanContext.SpanID(), "links to the recorded context")
		require.Equal(t, codes.Unset, s.Status().Code)

		got := headerContext(m.Headers)
		require.True(t, got.IsValid(), "the broker's copy carries a trace context")
		require.Equal(t, s.SpanContext().SpanID(), got.SpanID(), "the new span's context, not the request's")
		require.Equal(t, s.SpanContext().TraceID(), got.TraceID())

		a := attrs(s)
		require.Equal(t, "send", a["messaging.operation.type"].AsString())
		require.Equal(t, "publish", a["messaging.operation.name"].AsString())
		require.Equal(t, "nats", a["messaging.system"].AsString())
		require.Equal(t, m.Destination(), a["messaging.destination.name"].AsString())
		require.Equal(t, m.MessageID, a["messaging.message.id"].AsString())
		require.Equal(t, int64(2), a["messaging.message.body.size"].AsInt64())
		require.Equal(t, "ORDER_PAID", a[tracing.AttrEventType].AsString())
		require.Equal(t, "order", a[tracing.AttrAggregateType].AsString())
		require.Equal(t, int64(1), a[tracing.AttrAttempt].AsInt64())
	}
}

// recorded returns a message whose headers carry a write-time trace context.
func recorded(t *testing.T, tp trace.TracerProvider, tracestate string) (*outbox.Message, trace.SpanContext) {
	t.Helper()
	ctx := context.Background()
	if tracestate != "" {
		ts, err := trace.ParseTraceState(tracestate)
		require.NoError(t, err)
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
			TraceState: ts, Remote: true}))
	}
	ctx, span := tp.Tracer("test").Start(ctx, "write")
	defer span.End()
	h := map[string]string{"x-tenant": "acme"}
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(h))
	return &outbox.Message{MessageID: "m1", AggregateType: "order", AggregateID: "1", EventType: "ORDER_PAID",
		Payload: []byte(`{"a":1}`), Headers: h, Attempt: 3}, span.SpanContext()
}

func TestWrapPublisher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("NeverChangesTheCallersMessage", func(t *testing.T) {
		t.Parallel()
		tp, _ := recorder(t)
		m, _ := recorded(t, tp, "")
		before := *m
		headers := maps.Clone(m.Headers)
		pub := outboxtest.NewPublisher()
		require.Equal(t, []error{nil}, tracing.WrapPublisher(pub, tp).Publish(ctx, []*outbox.Message{m}))
		require.Equal(t, headers, m.Headers)
		require.Equal(t, before, *m)
		got := pub.Messages()[0]
		require.NotEqual(t, m.Headers["traceparent"], got.Headers["traceparent"])
		require.Equal(t, "acme", got.Headers["x-tenant"], "the caller's own headers travel on")
	})

	t.Run("CarriesTracestate", func(t *testing.T) {
		t.Parallel()
		tp, _ := recorder(t)
		m, _ := recorded(t, tp, "vendor=abc")
		require.Equal(t, "vendor=abc", m.Headers["tracestate"])
		pub := outboxtest.NewPublisher()
		tracing.WrapPublisher(pub, tp).Publish(ctx, []*outbox.Message{m})
		require.Equal(t, "vendor=abc", pub.Messages()[0].Headers["tracestate"])
	})

	t.Run("KeepsBaggage", func(t *testing.T) {
		t.Parallel()
		tp, sr := recorder(t)
		m, rec := recorded(t, tp, "")
		m.Headers["baggage"] = "tenant=acme"
		prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
		pub := outboxtest.NewPublisher()
		tracing.WrapPublisher(pub, tp, tracing.WithPropagator(prop)).Publish(ctx, []*outbox.Message{m})
		got := pub.Messages()[0].Headers
		require.Equal(t, "tenant=acme", got["baggage"])
		s := sr.Ended()[len(sr.Ended())-1]
		require.Equal(t, rec.SpanID(), s.Parent().SpanID())
		require.Equal(t, s.SpanContext().SpanID(), headerContext(got).SpanID())
	})

	t.Run("NewTraceLinksOnly", func(t *testing.T) {
		t.Parallel()
		tp, sr := recorder(t)
		m, rec := recorded(t, tp, "vendor=abc")
		pub := outboxtest.NewPublisher()
		tracing.WrapPublisher(pub, tp, tracing.WithNewTrace(true)).Publish(ctx, []*outbox.Message{m})
		s := sr.Ended()[len(sr.Ended())-1]
		require.Equal(t, "publish ORDER_PAID", s.Name())
		require.False(t, s.Parent().IsValid(), "a root span")
		require.NotEqual(t, rec.TraceID(), s.SpanContext().TraceID())
		require.Len(t, s.Links(), 1)
		require.Equal(t, rec, s.Links()[0].SpanContext.WithRemote(rec.IsRemote()))
		got := pub.Messages()[0].Headers
		require.Equal(t, s.SpanContext().TraceID(), headerContext(got).TraceID())
		_, stale := got["tracestate"]
		require.False(t, stale, "the recorded tracestate belongs to the old trace")
	})

	t.Run("NoRecordedContext", func(t *testing.T) {
		t.Parallel()
		tp, sr := recorder(t)
		pub := outboxtest.NewPublisher()
		m := &outbox.Message{MessageID: "m2", EventType: "E", Payload: []byte(`{}`)}
		tracing.WrapPublisher(pub, tp).Publish(ctx, []*outbox.Message{m})
		require.Len(t, sr.Ended(), 1)
		s := sr.Ended()[0]
		require.False(t, s.Parent().IsValid())
		require.Empty(t, s.Links())
		require.Equal(t, s.SpanContext().SpanID(), headerContext(pub.Messages()[0].Headers).SpanID())
		require.Nil(t, m.Headers, "still untouched")
	})

	t.Run("NoopProviderPassesThrough", func(t *testing.T) {
		t.Parallel()
		tp, _ := recorder(t)
		m, _ := recorded(t, tp, "vendor=abc")
		plain := &outbox.Message{MessageID: "m2", EventType: "E", Payload: []byte(`{}`)}
		for _, opts := range [][]tracing.Option{nil, {tracing.WithNewTrace(true)}} {
			pub := outboxtest.NewPublisher()
			tracing.WrapPublisher(pub, noop.NewTracerProvider(), opts...).Publish(ctx, []*outbox.Message{m, plain})
			require.Equal(t, m.Headers, pub.Messages()[0].Headers)
			require.Empty(t, pub.Messages()[1].Headers)
		}
	})

	t.Run("ConcurrentUse", func(t *testing.T) {
		t.Parallel()
		tp, sr := recorder(t)
		pub := outboxtest.NewPublisher()
		w := tracing.WrapPublisher(pub, tp)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				m, _ := recorded(t, tp, "")
				m.MessageID = fmt.Sprint(i)
				require.Equal(t, []error{nil}, w.Publish(ctx, []*outbox.Message{m}))
			})
		}
		wg.Wait()
		require.Equal(t, 8, pub.Count())
		require.Len(t, sr.Ended(), 16, "a write span and a publish span each")
	})

	require.Panics(t, func() { tracing.WrapPublisher(nil, noop.NewTracerProvider()) })
	require.Panics(t, func() { tracing.WrapPublisher(outboxtest.NewPublisher(), nil) })
}

func TestWrapPublisherEndsSpansWithTheResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		err   error
		class string
	}{
		{"Sent", nil, ""},
		{"Permanent", outbox.Permanent(errors.New("message too large")), "permanent"},
		{"Unavailable", outbox.Unavailable(errors.New("connection refused")), "unavailable"},
		{"Timeout", fmt.Errorf("publish: %w", context.DeadlineExceeded), "timeout"},
		{"Transient", errors.New("nack"), "transient"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tp, sr := recorder(t)
			pub := outboxtest.NewPublisher()
			pub.FailWith(func(*outbox.Message) error { return tc.err })
			m, _ := recorded(t, tp, "")
			errs := tracing.WrapPublisher(pub, tp).Publish(context.Background(), []*outbox.Message{m})
			require.Equal(t, []error{tc.err}, errs, "the publisher's results pass through")
			s := sr.Ended()[len(sr.Ended())-1]
			a := attrs(s)
			if tc.err == nil {
				require.Equal(t, codes.Unset, s.Status().Code)
				require.NotContains(t, a, attribute.Key("error.type"))
				require.Empty(t, s.Events())
				return
			}
			require.Equal(t, codes.Error, s.Status().Code)
			require.Equal(t, tc.err.Error(), s.Status().Description)
			require.Equal(t, tc.class, a["error.type"].AsString())
			require.Len(t, s.Events(), 1)
			require.Equal(t, "exception", s.Events()[0].Name)
		})
	}
}

// TestWrapPublisherKeepsPinger wraps a real Kafka publisher (in-process
// cluster): the relay's probe and /readyz still reach its Ping.
func TestWrapPublisherKeepsPinger(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	kp, err := kafkapub.New(cl)
	require.NoError(t, err)

	w := tracing.WrapPublisher(kp, noop.NewTracerProvider())
	p, ok := w.(outbox.Pinger)
	require.True(t, ok, "wrapping a Pinger gives a Pinger")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, p.Ping(ctx))
	require.Same(t, kp, w.(interface{ Unwrap() outbox.Publisher }).Unwrap())

	_, ok = tracing.WrapPublisher(outboxtest.NewPublisher(), noop.NewTracerProvider()).(outbox.Pinger)
	require.False(t, ok, "wrapping a publisher without Ping does not invent one")
}
