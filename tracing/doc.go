// Package tracing carries OpenTelemetry traces through the outbox.
//
// outbox.Writer records the W3C trace context of the writing request in each
// message's headers (traceparent, tracestate). [WrapPublisher] wraps the
// relay's publisher so that every publish gets a producer span that continues
// that context (and links to it), and the message reaches the broker with the
// new span's context in its headers, for consumers to continue:
//
//	tp, shutdown, err := tracing.Setup(ctx, tracing.Config{Exporter: tracing.ExporterOTLP,
//		Endpoint: "http://otel-collector:4318"})
//	defer shutdown(context.WithoutCancel(ctx))
//	relay, err := outbox.NewRelay(store, tracing.WrapPublisher(pub, tp, tracing.WithSystem("nats")))
//
// # Exporters
//
// [Setup] builds a provider for one of three exporters: none (the default,
// a no-op provider that passes headers through unchanged), stdout (JSON per
// span, for a look) and otlp (OTLP over HTTP). The standard OTEL_* variables
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES)
// apply where Config leaves a field empty.
//
// # Spans
//
// Each span is named "publish <destination>", of kind Producer, with the
// messaging.* attributes of the OpenTelemetry semantic conventions
// (operation, destination, message id, body size, system when set by
// [WithSystem]) and outbox.event_type, outbox.aggregate_type and
// outbox.attempt. A failed publish sets the span's status to Error and
// error.type to permanent, unavailable, timeout or transient.
package tracing
