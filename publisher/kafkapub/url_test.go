package kafkapub_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/kafkapub"
)

func TestClientOptionsRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, url, want string }{
		{"Scheme", "http://localhost:9092", `scheme "http" is not kafka`},
		{"NoBroker", "kafka://", "names no broker"},
		{"UnknownParameter", "kafka://h:9092?acks=1", `unknown parameter "acks"`},
		{"BadBool", "kafka://h:9092?tls=maybe", `parameter tls: "maybe" is not a boolean`},
		{"BadMechanism", "kafka://u:p@h:9092?sasl=gssapi", `"gssapi" is not plain`},
		{"MechanismWithoutUser", "kafka://h:9092?sasl=scram-sha-256", "needs a user"},
		{"MissingCA", "kafka://h:9092?tls_ca=/nonexistent/ca.pem", "parameter tls_ca"},
		{"BadPort", "kafka://u:s3cret@h:90x92", "bad port"},
		{"BadEscapeKeepsPasswordOut", "kafka://u:s3cret%zz@h:9092", "parse URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := kafkapub.ClientOptions(tc.url)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "s3cret")
		})
	}
}

func TestClientOptionsAccepts(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"kafka://h1:9092,h2:9093,h3",
		"kafka://u:p@h:9092?sasl=scram-sha-512&tls=true&client_id=relay&auto_create_topics=true",
		"kafka://h:9092?tls_insecure=true&tls_server_name=kafka.internal",
	} {
		opts, err := kafkapub.ClientOptions(url)
		require.NoError(t, err, url)
		require.NotEmpty(t, opts)
	}
}

// NewClient authenticates with the URL's user and mechanism against a kfake
// cluster that requires SASL.
func TestNewClientSASL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, method, param string }{
		{"Plain", "PLAIN", ""}, // a user without sasl= means plain
		{"ScramSHA256", "SCRAM-SHA-256", "scram-sha-256"},
		{"ScramSHA512", "SCRAM-SHA-512", "scram-sha-512"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic := testsvc.Name(t)
			c := cluster(t, topic, kfake.EnableSASL(), kfake.Superuser(tc.method, "relay", "pw"))
			url := func(pass string) string {
				u := "kafka://relay:" + pass + "@" + strings.Join(c.ListenAddrs(), ",")
				if tc.param != "" {
					u += "?sasl=" + tc.param
				}
				return u
			}

			cl, err := kafkapub.NewClient(url("pw"))
			require.NoError(t, err)
			defer cl.Close()
			p, err := kafkapub.New(cl)
			require.NoError(t, err)
			require.NoError(t, p.Ping(t.Context()))
			requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{message(topic, "a", 0)}), 1)

			bad, err := kafkapub.NewClient(url("wrong"))
			require.NoError(t, err)
			defer bad.Close()
			pb, err := kafkapub.New(bad)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			require.Error(t, pb.Ping(ctx))
		})
	}
}
