package daemon

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/testsvc"
)

func TestPlaintextCredentials(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, db, broker string
		headers          map[string]config.Secret
		want             []string // settings reported
	}{
		{"AMQP", "", "amqp://relay:pw@rabbit:5672/", nil, []string{"broker"}},
		{"AMQPS", "", "amqps://relay:pw@rabbit:5671/", nil, nil},
		{"AMQPNoPassword", "", "amqp://rabbit:5672/", nil, nil},
		{"Redis", "", "redis://:p@cache:6379/0", nil, []string{"broker"}},
		{"Rediss", "", "rediss://:p@cache:6380/0", nil, nil},
		{"MQTT", "", "mqtt://dev:pw@mqtt:1883", nil, []string{"broker"}},
		{"MQTTS", "", "mqtts://dev:pw@mqtt:8883", nil, nil},
		{"KafkaPlain", "", "kafka://u:pw@k1:9092,k2:9092", nil, []string{"broker"}},
		{"KafkaPlainNamed", "", "kafka://u:pw@k1:9092?sasl=plain", nil, []string{"broker"}},
		{"KafkaPlainTLS", "", "kafka://u:pw@k1:9093?tls=true", nil, nil},
		{"KafkaSCRAM", "", "kafka://u:pw@k1:9092?sasl=scram-sha-512", nil, nil},
		{"KafkaNoSASL", "", "kafka://k1:9092", nil, nil},
		{"WebhookQueryToken", "", "http://h/hook?api_key=x", nil, []string{"broker"}},
		{"WebhookHeaders", "", "http://h/hook", map[string]config.Secret{"Authorization": config.NewSecret("Bearer x")},
			[]string{"broker.headers"}},
		{"WebhookHTTPS", "", "https://u:pw@h/hook?api_key=x", map[string]config.Secret{"A": config.NewSecret("x")}, nil},
		{"WebhookPlain", "", "http://h/hook", nil, nil},
		{"PostgresDisable", "postgres://u:pw@db/shop?sslmode=disable", "nats://n:4222", nil, []string{"db"}},
		{"PostgresQueryPassword", "postgres://u@db/shop?sslmode=allow&password=pw", "nats://n:4222", nil, []string{"db"}},
		{"PostgresRequire", "postgres://u:pw@db/shop?sslmode=require", "nats://n:4222", nil, nil},
		{"PostgresNoPassword", "postgres://u@db/shop?sslmode=disable", "nats://n:4222", nil, nil},
		{"MySQL", "mysql://u:pw@db:3306/shop", "nats://n:4222", nil, []string{"db"}},
		{"MySQLTLS", "mysql://u:pw@db:3306/shop?tls=true", "nats://n:4222", nil, nil},
		{"NATSNotReported", "", "nats://u:pw@n:4222", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			cfg.DB = config.NewSecret(tc.db)
			if tc.headers != nil {
				cfg.Brokers = []config.Broker{{Name: "b", URL: config.NewSecret(tc.broker), Headers: tc.headers}}
			} else {
				cfg.Broker = config.NewSecret(tc.broker)
			}
			var got []string
			for _, c := range plaintextCredentials(cfg) {
				got = append(got, strings.Replace(c.setting, "brokers[0]", "broker", 1))
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// The daemon warns once per broker at start, naming it and the setting,
// never the password: here against the real RabbitMQ (guest:guest over
// amqp://) and Mosquitto, and a webhook with an API key over http://.
func TestRunWarnsPlaintextCredentials(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	dsn, _, _ := sqliteDB(t)
	mqttURL := strings.Replace(testsvc.MQTTURL(t), "tcp://", "mqtt://devuser:mqttpw1@", 1)
	cfg := baseConfig(dsn,
		config.Broker{Name: "rabbit", URL: config.NewSecret(testsvc.AMQPURL(t))},
		config.Broker{Name: "devices", URL: config.NewSecret(mqttURL)},
		config.Broker{Name: "partner", URL: config.NewSecret(srv.URL + "/hook"),
			Headers: map[string]config.Secret{"X-Api-Key": config.NewSecret("key-5f3a9c")}},
	)
	cfg.DefaultRoute = &config.Route{Broker: "rabbit"}
	_, logs, stop := startLogged(t, cfg)
	require.NoError(t, stop())
	out := logs.String()
	require.Equal(t, 3, strings.Count(out, `"msg":"credentials sent without TLS"`), out)
	for _, want := range []string{
		`"broker":"rabbit","setting":"brokers[0].url","fix":"use amqps://"`,
		`"broker":"devices","setting":"brokers[1].url","fix":"use mqtts://"`,
		`"broker":"partner","setting":"brokers[2].headers","fix":"use https://"`,
	} {
		require.Contains(t, out, want)
	}
	for _, secret := range []string{"guest:guest", "mqttpw1", "key-5f3a9c"} {
		require.NotContains(t, out, secret)
	}
}
