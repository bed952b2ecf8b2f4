package tracing

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The exporters Setup knows.
const (
	ExporterNone   = "none"   // no tracing: a no-op provider (the default)
	ExporterStdout = "stdout" // one JSON document per span on Config.Stdout, for trying things out
	ExporterOTLP   = "otlp"   // OTLP over HTTP to a collector (Jaeger, Tempo, the OpenTelemetry Collector)
)

// DefaultServiceName is the service.name resource attribute when neither
// Config.ServiceName nor OTEL_SERVICE_NAME sets one.
const DefaultServiceName = "outbox-relay"

// Config selects and configures the trace exporter of the daemon.
type Config struct {
	// Exporter is ExporterNone, ExporterStdout or ExporterOTLP. Default: "" (none).
	Exporter string
	// Endpoint is the OTLP/HTTP URL of the collector, e.g.
	// http://otel-collector:4318; /v1/traces is added when the URL has no
	// path. Default: "" (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318). Only for otlp.
	Endpoint string
	// Headers are sent with every OTLP request (e.g. an API key). Only for otlp.
	Headers map[string]string
	// ServiceName is the service.name resource attribute. Default: "" (OTEL_SERVICE_NAME, else DefaultServiceName).
	ServiceName string
	// SampleRatio is the fraction of new traces sampled, between 0 and 1;
	// spans whose recorded context was sampled (or not) follow that decision.
	// Default: 0, which means 1 (every trace).
	SampleRatio float64
	// Stdout receives the stdout exporter's output. Default: os.Stdout.
	Stdout io.Writer
}

// Setup builds the tracer provider cfg describes, and a shutdown function
// that flushes the spans still buffered and stops the exporter (call it
// before the process exits; it honours ctx's deadline). With ExporterNone it
// returns a no-op provider and a shutdown that does nothing. It returns an
// error for an unknown exporter, a bad endpoint or a sample ratio outside
// [0, 1]. The exporter sends in the background and never blocks a publish.
func Setup(ctx context.Context, cfg Config) (trace.TracerProvider, func(context.Context) error, error) {
	nothing := func(context.Context) error { return nil }
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, nil, fmt.Errorf("tracing: sample ratio %v is not between 0 and 1", cfg.SampleRatio)
	}
	var exp sdktrace.SpanExporter
	switch cfg.Exporter {
	case "", ExporterNone:
		return noop.NewTracerProvider(), nothing, nil
	case ExporterStdout:
		w := cfg.Stdout
		if w == nil {
			w = os.Stdout
		}
		e, err := stdouttrace.New(stdouttrace.WithWriter(w))
		if err != nil {
			return nil, nil, fmt.Errorf("tracing: stdout exporter: %w", err)
		}
		exp = e
	case ExporterOTLP:
		opts, err := otlpOptions(cfg)
		if err != nil {
			return nil, nil, err
		}
		e, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("tracing: otlp exporter: %w", err)
		}
		exp = e
	default:
		return nil, nil, fmt.Errorf("tracing: unknown exporter %q; want %s, %s or %s",
			cfg.Exporter, ExporterNone, ExporterStdout, ExporterOTLP)
	}

	res, err := newResource(ctx, cfg.ServiceName)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, nil, err
	}
	ratio := cfg.SampleRatio
	if ratio == 0 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	return tp, tp.Shutdown, nil
}

// otlpOptions turns cfg into the OTLP/HTTP exporter's options.
func otlpOptions(cfg Config) ([]otlptracehttp.Option, error) {
	var opts []otlptracehttp.Option
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("tracing: otlp endpoint %q is not an http:// or https:// URL with a host", cfg.Endpoint)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
	}
	return opts, nil
}

// newResource describes the process: the SDK, service.name (DefaultServiceName,
// then OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, then name when set).
func newResource(ctx context.Context, name string) (*resource.Resource, error) {
	opts := []resource.Option{
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(DefaultServiceName)),
		resource.WithFromEnv(),
	}
	if name != "" {
		opts = append(opts, resource.WithAttributes(semconv.ServiceName(name)))
	}
	res, err := resource.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return res, nil
}
