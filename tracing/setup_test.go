package tracing_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/tracing"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestSetupRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  tracing.Config
		want string
	}{
		{"UnknownExporter", tracing.Config{Exporter: "jaeger"}, `unknown exporter "jaeger"; want none, stdout or otlp`},
		{"NegativeRatio", tracing.Config{Exporter: "otlp", SampleRatio: -0.1}, "sample ratio -0.1 is not between 0 and 1"},
		{"RatioOverOne", tracing.Config{SampleRatio: 2}, "sample ratio 2 is not between 0 and 1"},
		{"EndpointScheme", tracing.Config{Exporter: "otlp", Endpoint: "grpc://collector:4317"}, "is not an http:// or https:// URL"},
		{"EndpointNoHost", tracing.Config{Exporter: "otlp", Endpoint: "http:///v1/traces"}, "is not an http:// or https:// URL"},
		{"EndpointNotURL", tracing.Config{Exporter: "otlp", Endpoint: "collector:4318"}, "is not an http:// or https:// URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tp, shutdown, err := tracing.Setup(context.Background(), tc.cfg)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, tp)
			require.Nil(t, shutdown)
		})
	}
}

func TestSetupNone(t *testing.T) {
	t.Parallel()
	for _, exp := range []string{"", tracing.ExporterNone} {
		tp, shutdown, err := tracing.Setup(context.Background(), tracing.Config{Exporter: exp})
		require.NoError(t, err)
		require.IsType(t, noop.TracerProvider{}, tp)
		require.NoError(t, shutdown(context.Background()))
	}
}

func TestSetupStdout(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	tp, shutdown, err := tracing.Setup(context.Background(), tracing.Config{Exporter: tracing.ExporterStdout,
		Stdout: &out, ServiceName: "billing-relay"})
	require.NoError(t, err)
	pub := outboxtest.NewPublisher()
	errs := tracing.WrapPublisher(pub, tp).Publish(context.Background(),
		[]*outbox.Message{{MessageID: "m1", EventType: "ORDER_PAID", Payload: []byte(`{}`)}})
	require.Equal(t, []error{nil}, errs)
	require.NoError(t, shutdown(context.Background()), "flushes the batch")
	require.Contains(t, out.String(), `"Name":"publish ORDER_PAID"`)
	require.Contains(t, out.String(), `"Value":"billing-relay"`)
	require.Contains(t, pub.Messages()[0].Headers, "traceparent")
}

// collector is a stand-in OTLP/HTTP endpoint that records the requests it gets.
type collector struct {
	mu   sync.Mutex
	reqs []*http.Request
	body [][]byte
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	c.body = append(c.body, b)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

func TestSetupOTLP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, wantPath string
	}{
		{"DefaultPath", "", "/v1/traces"},
		{"RootPath", "/", "/v1/traces"},
		{"OwnPath", "/otlp/traces", "/otlp/traces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			col := &collector{}
			srv := httptest.NewServer(col)
			t.Cleanup(srv.Close)
			tp, shutdown, err := tracing.Setup(context.Background(), tracing.Config{Exporter: tracing.ExporterOTLP,
				Endpoint: srv.URL + tc.path, Headers: map[string]string{"x-api-key": "k1"}})
			require.NoError(t, err)
			tracing.WrapPublisher(outboxtest.NewPublisher(), tp).Publish(context.Background(),
				[]*outbox.Message{{MessageID: "m1", EventType: "ORDER_PAID", Payload: []byte(`{}`)}})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, shutdown(ctx), "flushes the span to the collector")

			col.mu.Lock()
			defer col.mu.Unlock()
			require.Len(t, col.reqs, 1)
			r := col.reqs[0]
			require.Equal(t, http.MethodPost, r.Method)
			require.Equal(t, tc.wantPath, r.URL.Path)
			require.Equal(t, "k1", r.Header.Get("x-api-key"))
			require.Equal(t, "application/x-protobuf", r.Header.Get("Content-Type"))
			require.True(t, strings.Contains(string(col.body[0]), "publish ORDER_PAID"), "the span's name is in the payload")
			require.True(t, strings.Contains(string(col.body[0]), tracing.DefaultServiceName))
		})
	}
}
