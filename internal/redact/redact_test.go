package redact

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestURLs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"WebhookQueryAndPath", `Post "https://hooks.example.com/T0123/B456/abc?api_key=s3cr3t&x=1": EOF`,
			`Post "https://hooks.example.com/REDACTED?api_key=REDACTED&x=REDACTED": EOF`},
		{"WebhookUserinfo", `Head "http://alice:pw@h:8080/": refused`, `Head "http://REDACTED@h:8080/": refused`},
		{"WebhookTokenAsUser", `https://ghp_token@h/x`, `https://REDACTED@h/REDACTED`},
		{"ShortPasswordInURL", "dial amqp://guest:a@rabbit:5672/vhost: refused", "dial amqp://guest:REDACTED@rabbit:5672/vhost: refused"},
		{"KafkaHosts", "kafka://u:pw@k1:9092,k2:9092?sasl=plain&password=x failed", "kafka://u:REDACTED@k1:9092,k2:9092?sasl=plain&password=REDACTED failed"},
		{"Fragment", "see https://h/#frag", "see https://h/#REDACTED"},
		{"RootPathKept", "https://h/ and redis://h:6379/0", "https://h/ and redis://h:6379/0"},
		{"SQLDSN", "open root:pw@tcp(127.0.0.1:3306)/test", "open root:REDACTED@tcp(127.0.0.1:3306)/test"},
		{"Nothing", "connection refused", "connection refused"},
		{"GluedToAWord", "url=_amqp://u:pw@h", "url=_amqp://u:REDACTED@h"},
		{"PostgresQuery", "postgres://app:s3cret@db:5432/orders?sslmode=disable", "postgres://app:REDACTED@db:5432/orders?sslmode=disable"},
		{"NATS", "nats://user:pass@broker:4222", "nats://user:REDACTED@broker:4222"},
		{"UserKept", "postgres://postgres@db/x and root@tcp(db:3306)/x", "postgres://postgres@db/x and root@tcp(db:3306)/x"},
		{"SQLitePathKept", "sqlite:///tmp/x.db", "sqlite:///tmp/x.db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, URLs(tc.in))
		})
	}
}

func TestRedactor(t *testing.T) {
	t.Parallel()
	var r Redactor
	r.AddURL("postgres://u:hunter2pw@db/shop?sslmode=disable&password=pgsecret9", false)
	r.AddURL("amqp://guest:xy@rabbit/", false)
	r.AddURL("https://h/hooks/T0SECRETPATH/{destination}?code=azfunc", true)
	r.AddURL("root:myp4ss@tcp(127.0.0.1:3306)/test", false)
	r.AddValue("Bearer tok3n")
	r.AddValue("whsec_MDEyMzQ1Njc4OWFiY2RlZg==")
	for _, tc := range []struct{ name, in, want string }{
		{"LongPasswordAnywhere", "auth failed for hunter2pw.", "auth failed for REDACTED."},
		{"SensitiveQueryValue", "password pgsecret9 rejected", "password REDACTED rejected"},
		{"PlainQueryValueKept", "sslmode disable", "sslmode disable"},
		{"WebhookQueryValue", `body: "bad code azfunc"`, `body: "bad code REDACTED"`},
		{"WebhookPathSegment", "unknown hook T0SECRETPATH", "unknown hook REDACTED"},
		{"ShortPasswordNotBare", "xy is not searched for: xylophone", "xy is not searched for: xylophone"},
		{"MidLengthAsWord", "myp4ss, not myp4ssword", "REDACTED, not myp4ssword"},
		{"HeaderValueAndToken", "got Bearer tok3n; token tok3n", "got REDACTED; token REDACTED"},
		{"SigningSecret", "secret whsec_MDEyMzQ1Njc4OWFiY2RlZg== bad", "secret REDACTED bad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, r.String(tc.in))
		})
	}

	base := errors.New("dial hunter2pw")
	err := r.Error(fmt.Errorf("open: %w", base))
	require.EqualError(t, err, "open: dial REDACTED")
	require.ErrorIs(t, err, base)
	plain := errors.New("nothing")
	require.Same(t, plain, r.Error(plain))
	require.NoError(t, r.Error(nil))
	var none *Redactor
	require.Equal(t, "amqp://u:REDACTED@h", none.String("amqp://u:pw@h"), "nil knows URLs only")
}

// A user without a password is a name in a database or broker URL, and
// stays in log lines; where the user part can be a token (NATS, a webhook,
// a scheme we do not know) it is removed.
func TestRedactorUserWithoutPassword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, url, in, want string }{
		{"Postgres", "postgres://relay@db:5432/app?sslmode=disable", "relay started on outbox_message", "relay started on outbox_message"},
		{"PostgresOutbox", "postgresql://outbox@db/app", "outbox_message: relay cycle failed", "outbox_message: relay cycle failed"},
		{"SQLDSN", "root@tcp(127.0.0.1:3306)/test", "root cause: refused", "root cause: refused"},
		{"MySQL", "mysql://relay@db:3306/app", "relay cycle failed", "relay cycle failed"},
		{"Redis", "redis://relay@cache:6379/0", "relay stopped", "relay stopped"},
		{"AMQP", "amqp://relay@rabbit:5672/", "relay stopped", "relay stopped"},
		{"NATSToken", "nats://s3cr3tt0ken@broker:4222", "authorization s3cr3tt0ken refused", "authorization REDACTED refused"},
		{"NATSShortToken", "nats://tok3n@broker:4222", "token tok3n refused", "token REDACTED refused"},
		{"UnknownScheme", "foo://tok3n@h", "token tok3n refused", "token REDACTED refused"},
		{"Webhook", "https://hookuser@h/x", "user hookuser refused", "user REDACTED refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r Redactor
			r.AddURL(tc.url, strings.HasPrefix(tc.url, "https://"))
			require.Equal(t, tc.want, r.String(tc.in))
		})
	}
}

// Whatever the password and the text around it, a URL's password and a
// webhook URL's query value never survive.
func FuzzURLs(f *testing.F) {
	f.Add("a", "tok", "dial ", ": refused")
	f.Add("p%40ss", "x&y=1", `Post "`, `": EOF`)
	f.Add("hunter2", "t", "(", ")")
	f.Add("pw", "t", "x_", "")
	f.Fuzz(func(t *testing.T, pw, token, before, after string) {
		if pw == "" || token == "" || strings.ContainsAny(pw+token, "@/?#&=:\"'<>` \t\r\n\v\f\u0085\u00a0") {
			t.Skip()
		}
		text := before + "amqp://u:" + pw + "@h:5672/ and https://h/x?k=" + token + after
		out := URLs(text)
		require.NotContains(t, out, "u:"+pw+"@")
		require.NotContains(t, out, "k="+token)
	})
}
