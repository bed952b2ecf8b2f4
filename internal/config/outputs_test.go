package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateOutputs(t *testing.T) {
	t.Parallel()
	broker := func(name, url string) Broker { return Broker{Name: name, URL: NewSecret(url)} }
	for _, tc := range []struct {
		name    string
		brokers []Broker
		routes  []Route
		want    string // "" = valid
	}{
		{"CloudEventsBinaryOnKafka", []Broker{{Name: "k", URL: NewSecret("kafka://127.0.0.1:9092"), Format: FormatCloudEvents}}, nil, ""},
		{"StructuredOnMQTT", []Broker{{Name: "m", URL: NewSecret("mqtt://127.0.0.1"), Format: FormatCloudEvents}}, nil, ""},
		{"UnknownFormat", []Broker{{Name: "k", URL: NewSecret("kafka://h"), Format: "avro"}}, nil,
			`brokers[0].format: "avro" is not outbox or cloudevents`},
		{"UnknownMode", []Broker{{Name: "k", URL: NewSecret("kafka://h"), Format: FormatCloudEvents, CloudEventsMode: "mixed"}}, nil,
			`brokers[0].cloudevents_mode: "mixed" is not binary or structured`},
		{"ModeWithoutCloudEvents", []Broker{{Name: "k", URL: NewSecret("kafka://h"), CloudEventsMode: CloudEventsBinary}}, nil,
			`brokers[0].cloudevents_mode: is for format: cloudevents, and this one is outbox`},
		{"BinaryOnRedis", []Broker{{Name: "r", URL: NewSecret("redis://h"), Format: FormatCloudEvents, CloudEventsMode: CloudEventsBinary}}, nil,
			`brokers[0].cloudevents_mode: binary mode puts the attributes in headers, which redis has not`},
		{"BinaryRouteOnMQTT", []Broker{broker("m", "mqtt://h")},
			[]Route{{EventType: "A", Broker: "m", Format: FormatCloudEvents, CloudEventsMode: CloudEventsBinary}},
			`routes[0].cloudevents_mode: binary mode puts the attributes in headers, which mqtt has not`},
		{"BatchedWebhook", []Broker{{Name: "w", URL: NewSecret("https://h/in"), Batch: 10}},
			[]Route{{EventType: "A", Broker: "w", Format: FormatCloudEvents}},
			`routes[0].format: cloudevents sends one event per webhook request, and broker w batches`},
		{"WebhookTwoFormats", []Broker{broker("w", "https://h/in")},
			[]Route{{EventType: "A", Broker: "w", Format: FormatCloudEvents}, {EventType: "B", Broker: "w"}},
			`routes[1].format: broker w (https) sends one format, and routes[0] gives it cloudevents`},
		{"KafkaTwoFormats", []Broker{broker("k", "kafka://h")},
			[]Route{{EventType: "A", Broker: "k", Format: FormatCloudEvents, CloudEventsMode: CloudEventsStructured}, {EventType: "B", Broker: "k"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			c.DB = NewSecret("postgres://u@localhost/db")
			c.Brokers, c.Routes = tc.brokers, tc.routes
			if len(tc.routes) > 0 {
				c.DefaultRoute = &Route{Broker: tc.brokers[0].Name}
			}
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestValidateCloudEventsSource(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ source, want string }{
		{"", ""}, {"/shop/orders", ""}, {"https://shop.example.com/orders", ""}, {"urn:shop:orders", ""},
		{"%zz", `cloudevents_source: "%zz" is not a URI-reference`},
		{"/shop orders", `cloudevents_source: "/shop orders" is not a URI-reference`},
	} {
		t.Run(tc.source, func(t *testing.T) {
			t.Parallel()
			c := Default()
			c.DB = NewSecret("postgres://u@localhost/db")
			c.Broker = NewSecret("kafka://h")
			c.CloudEventsSource = tc.source
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestRouteOutput(t *testing.T) {
	t.Parallel()
	kafka := &Broker{Name: "k", URL: NewSecret("kafka://h")}
	ceKafka := &Broker{Name: "k", URL: NewSecret("kafka://h"), Format: FormatCloudEvents, CloudEventsMode: CloudEventsStructured}
	redis := &Broker{Name: "r", URL: NewSecret("redis://h"), Format: FormatCloudEvents}
	for _, tc := range []struct {
		name string
		r    Route
		b    *Broker
		want Output
	}{
		{"Default", Route{}, kafka, Output{Format: FormatOutbox}},
		{"RouteChoosesCloudEvents", Route{Format: FormatCloudEvents}, kafka, Output{FormatCloudEvents, CloudEventsBinary}},
		{"BrokerMode", Route{}, ceKafka, Output{FormatCloudEvents, CloudEventsStructured}},
		{"RouteOverridesMode", Route{CloudEventsMode: CloudEventsBinary}, ceKafka, Output{FormatCloudEvents, CloudEventsBinary}},
		{"RouteBackToOutbox", Route{Format: FormatOutbox}, ceKafka, Output{Format: FormatOutbox}},
		{"RedisStructured", Route{}, redis, Output{FormatCloudEvents, CloudEventsStructured}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, RouteOutput(&tc.r, tc.b))
		})
	}
}
