package config

import (
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/outboxkit/outbox/internal/redact"
)

// redacted replaces a secret, or the secret part of a DSN, when printed.
const redacted = redact.Mask

// Secret holds a value that must not be printed or logged as is: a database
// DSN or broker URL that may carry a password, or a webhook signing secret.
// Printing a Secret (fmt's %v and %s, %#v, slog, YAML and JSON marshalling)
// shows [Secret.Redacted]; only [Secret.Value] gives the real value. The zero
// value is the empty secret. A Secret is immutable and safe for concurrent use.
type Secret struct {
	v string
}

// NewSecret returns a Secret holding v.
func NewSecret(v string) Secret { return Secret{v: v} }

// Value returns the secret in clear, for handing to a driver or client.
func (s Secret) Value() string { return s.v }

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s.v == "" }

// String returns [Secret.Redacted].
func (s Secret) String() string { return s.Redacted() }

// GoString returns [Secret.Redacted] quoted, for %#v.
func (s Secret) GoString() string { return fmt.Sprintf("config.Secret(%q)", s.Redacted()) }

// LogValue returns [Secret.Redacted], so slog never logs the secret.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.Redacted()) }

// MarshalText returns [Secret.Redacted]: encoders never write the secret.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.Redacted()), nil }

// MarshalYAML returns [Secret.Redacted]: a dumped config never holds the secret.
func (s Secret) MarshalYAML() (any, error) { return s.Redacted(), nil }

// UnmarshalYAML accepts any scalar (a string, or a number written without
// quotes) and rejects maps and lists.
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: expected a string, found a %s", n.Line, kindName(n.Kind))
	}
	s.v = n.Value
	return nil
}

// Scheme returns the lower-case URL scheme of the value (the text before
// "://"), or "" when it has none. It never reveals the rest.
func (s Secret) Scheme() string {
	scheme, _, ok := strings.Cut(s.v, "://")
	if !ok || !validScheme.MatchString(scheme) {
		return ""
	}
	return strings.ToLower(scheme)
}

var validScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// goSQLDSN matches a go-sql-driver DSN with a password: user:password@net(addr)/db.
var goSQLDSN = regexp.MustCompile(`^([^:@/]*):(.*)@([a-z0-9]*\(.*\))?/`)

// Redacted returns a printable form: for a URL, the URL with its password and
// any query parameter that looks like a credential (password, secret, token,
// key, ...) replaced by REDACTED (for an http:// or https:// webhook URL, its
// whole user information, path, fragment and every query value); for a go-sql-driver DSN, the DSN with its
// password replaced; for anything else (a signing secret), REDACTED. The
// empty secret is "".
func (s Secret) Redacted() string {
	if s.v == "" {
		return ""
	}
	if s.Scheme() != "" {
		return redactURL(s.v)
	}
	if m := goSQLDSN.FindStringSubmatchIndex(s.v); m != nil {
		return s.v[:m[4]] + redacted + s.v[m[5]:]
	}
	return redacted
}

// redactURL masks the passwords and credential-like query parameters of raw,
// which may be a comma-separated list of URLs or hosts (nats://a,nats://b;
// kafka://user:pw@k1,k2). A URL that does not parse is masked whole after its
// scheme, since the parser could not say where a password ends.
func redactURL(raw string) string {
	pieces := strings.Split(raw, ",")
	for i, p := range pieces {
		if strings.Contains(p, "://") {
			pieces[i] = redactOneURL(p, false)
		} else if i > 0 {
			// A further host of the first URL, or the rest of a password that
			// held a comma: read it as a URL and mask any user info whole.
			pieces[i] = strings.TrimPrefix(redactOneURL("x://"+p, true), "x://")
		}
	}
	return strings.Join(pieces, ",")
}

func redactOneURL(raw string, maskUser bool) string {
	u, err := url.Parse(raw)
	if err != nil {
		scheme, _, _ := strings.Cut(raw, "://")
		return scheme + "://" + redacted
	}
	// A webhook URL may carry a token anywhere: as its user, in its path
	// (https://hooks.slack.com/services/T0/B0/XXXX) or in any parameter.
	web := u.Scheme == "http" || u.Scheme == "https"
	if (maskUser || web) && u.User != nil {
		u.User = url.User(redacted)
	} else if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	if web && len(u.Path) > 1 {
		u.Path, u.RawPath = "/"+redacted, ""
	}
	if web && u.Fragment != "" {
		u.Fragment, u.RawFragment = redacted, ""
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if web || redact.SensitiveParam(k) {
				q[k] = []string{redacted}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "map"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	case yaml.DocumentNode:
		return "document"
	}
	return "value"
}
