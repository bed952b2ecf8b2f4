package daemon

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/redact"
)

// plaintextCredential is a setting whose credentials would cross the network
// without TLS.
type plaintextCredential struct {
	name    string // the broker's name, or "" for the database
	setting string // the config key: db, broker, brokers[1].url, brokers[2].headers
	fix     string // what to do instead
}

// plaintextCredentials finds the URLs of cfg that carry a password (or, for a
// webhook, any credential: user information, query values, headers) to a
// server without TLS: amqp://, redis://, mqtt:// and http:// with one, kafka://
// with SASL/PLAIN and no tls, postgres:// with sslmode disable or allow, and
// mysql:// without tls. SCRAM (kafka) and NATS, whose server may demand TLS,
// are not reported.
func plaintextCredentials(cfg *config.Config) []plaintextCredential {
	var found []plaintextCredential
	if fix := plaintextDB(cfg.DB.Value()); fix != "" {
		found = append(found, plaintextCredential{setting: "db", fix: fix})
	}
	for i, b := range cfg.EffectiveBrokers() {
		key := fmt.Sprintf("brokers[%d].url", i)
		if !cfg.Broker.IsZero() {
			key = "broker"
		}
		u := splitURL(b.URL.Value())
		var fix string
		switch u.scheme {
		case "amqp", "redis", "mqtt":
			if u.password() {
				fix = "use " + u.scheme + "s://"
			}
		case "kafka":
			mech := strings.ToLower(u.query.Get("sasl"))
			tls := u.query.Get("tls") == "true" || u.query.Get("tls_ca") != "" || u.query.Get("tls_server_name") != "" ||
				u.query.Get("tls_insecure") == "true"
			if u.user() != "" && (mech == "" || mech == "plain") && !tls {
				fix = "add tls=true, or use sasl=scram-sha-512"
			}
		case "http":
			switch {
			case u.user() != "" || len(u.query) > 0:
				fix = "use https://"
			case len(b.Headers) > 0:
				key = strings.TrimSuffix(key, ".url") + ".headers"
				fix = "use https://"
			}
		}
		if fix != "" {
			found = append(found, plaintextCredential{name: b.Name, setting: key, fix: fix})
		}
	}
	return found
}

// plaintextDB returns what to do when the database URL sends a password
// without TLS, or "".
func plaintextDB(dsn string) string {
	u := splitURL(dsn)
	switch u.scheme {
	case "postgres", "postgresql":
		if !u.password() && u.query.Get("password") == "" {
			return ""
		}
		switch u.query.Get("sslmode") {
		case "disable", "allow":
			return "set sslmode=require or verify-full"
		}
	case "mysql":
		if !u.password() {
			return ""
		}
		switch strings.ToLower(u.query.Get("tls")) {
		case "", "false", "preferred":
			return "set tls=true"
		}
	}
	return ""
}

// urlParts are the parts of a URL the checks need, split by hand because a
// broker URL may list hosts (kafka://k1:9092,k2:9092), which net/url refuses.
type urlParts struct {
	scheme   string
	userinfo string
	query    url.Values
}

func splitURL(raw string) urlParts {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return urlParts{}
	}
	p := urlParts{scheme: strings.ToLower(scheme)}
	auth := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		auth = rest[:i]
	}
	if at := strings.LastIndex(auth, "@"); at >= 0 {
		p.userinfo = auth[:at]
	}
	if _, q, ok := strings.Cut(rest, "?"); ok {
		q, _, _ = strings.Cut(q, "#")
		p.query, _ = url.ParseQuery(q)
	}
	return p
}

func (p urlParts) user() string {
	u, _, _ := strings.Cut(p.userinfo, ":")
	return u
}

// password reports whether the URL has a password, in its user information
// or in a query parameter named like one.
func (p urlParts) password() bool {
	if _, pw, ok := strings.Cut(p.userinfo, ":"); ok && pw != "" {
		return true
	}
	for k := range p.query {
		if redact.SensitiveParam(k) {
			return true
		}
	}
	return false
}

// warnPlaintextCredentials logs one warning per setting that sends a
// password without TLS, naming the broker and the setting, never the value.
func (d *Daemon) warnPlaintextCredentials() {
	for _, c := range plaintextCredentials(d.cfg) {
		attrs := []any{"setting", c.setting, "fix", c.fix}
		if c.name != "" {
			attrs = append([]any{"broker", c.name}, attrs...)
		}
		d.log.Warn("credentials sent without TLS", attrs...)
	}
}
