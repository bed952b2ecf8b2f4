// Package redact removes secrets from text bound for a log line, a row's
// last_error, a trace span or an HTTP answer.
//
// It works two ways. Structurally, it rewrites every URL it finds in the
// text: the password, the fragment and the values of query parameters named
// like credentials (password, token, key, ...) become REDACTED; of an http
// or https URL (a webhook, where any part may be a token) the whole user
// information, every query value and the path do. So does the password of a
// go-sql-driver DSN (user:password@tcp(host)/db). That removes a password of any length where
// it appears in a URL, without searching for it as a bare word. Then it
// replaces the known secret values a [Redactor] was given wherever they
// appear as words: a value of 8 bytes or more anywhere, one of 4 to 7 bytes
// only as a whole word (between characters that are not letters or digits),
// and a shorter one never (it cannot be told from ordinary text; in a URL
// the structural pass removes it).
package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask replaces what is removed.
const Mask = "REDACTED"

// Lengths of a known value below which it is replaced only as a whole word
// (wordLen) or not searched for as a bare word at all (minLen).
const (
	minLen  = 4
	wordLen = 8
)

// Redactor removes known secrets and the secret parts of URLs from text. The
// zero value removes URL parts only. Add secrets before sharing it: adding
// is not safe for concurrent use; String and Error are.
type Redactor struct {
	values []string // longest first
}

// AddValue adds a secret to remove wherever it appears: a signing key, a
// header value. For a header value such as "Bearer abc...", each word after
// the first is a secret too.
func (r *Redactor) AddValue(v string) {
	r.add(v)
	if fields := strings.Fields(v); len(fields) > 1 {
		for _, f := range fields[1:] {
			r.add(f)
		}
	}
}

// AddURL adds a database DSN or a broker URL (or a comma-separated list of
// them): the whole value, each password (raw and %-decoded), and the value
// of every query parameter whose name looks like a credential. A webhook
// URL (web true) gives all its query values, its user name and each path
// segment of 8 bytes or more, since any of them may be a token. A user
// name without a password is a secret only where the user part can carry
// a token (a webhook, NATS, an unknown scheme); of a database, Redis, AMQP,
// MQTT or Kafka URL, or a go-sql-driver DSN, it is a name (often "outbox"
// or "relay"), which would otherwise be cut out of every log line.
func (r *Redactor) AddURL(raw string, web bool) {
	r.add(raw)
	for piece := range strings.SplitSeq(raw, ",") {
		if m := sqlDSN.FindStringSubmatch(piece); m != nil {
			r.add(m[2])
		}
		scheme, rest, hasScheme := strings.Cut(piece, "://")
		scheme = strings.ToLower(strings.TrimSpace(scheme))
		if !hasScheme { // a go-sql-driver DSN, or a bare host list
			scheme, rest, piece = "", piece, "x://"+piece
		}
		if at := strings.LastIndex(authority(rest), "@"); at >= 0 {
			user, pw, ok := strings.Cut(rest[:at], ":")
			if ok {
				r.addEscaped(pw)
			}
			if web || !ok && !userNames[scheme] {
				r.addEscaped(user)
			}
		}
		u, err := url.Parse(piece)
		if err != nil {
			continue
		}
		for k, vs := range u.Query() {
			if web || SensitiveParam(k) {
				for _, v := range vs {
					r.add(v)
				}
			}
		}
		if web {
			for seg := range strings.SplitSeq(u.Path, "/") {
				if len(seg) >= wordLen && !strings.Contains(seg, "{") {
					r.add(seg)
				}
			}
		}
	}
}

// userNames are the URL schemes whose user part, without a password, is a
// user name rather than a token; "" is a value without a scheme (a
// go-sql-driver DSN, user@tcp(host)/db).
var userNames = map[string]bool{
	"": true, "postgres": true, "postgresql": true, "mysql": true, "mariadb": true,
	"redis": true, "rediss": true, "unix": true, "amqp": true, "amqps": true,
	"mqtt": true, "mqtts": true, "tcp": true, "ssl": true, "kafka": true,
}

// addEscaped adds v and its %-decoded form.
func (r *Redactor) addEscaped(v string) {
	r.add(v)
	if dec, err := url.PathUnescape(v); err == nil {
		r.add(dec)
	}
}

func (r *Redactor) add(v string) {
	if len(v) < minLen || slices.Contains(r.values, v) || v == Mask {
		return
	}
	r.values = append(r.values, v)
	slices.SortStableFunc(r.values, func(a, b string) int { return len(b) - len(a) })
}

// String returns s without the secret parts of its URLs and DSNs and
// without the known secrets. A nil Redactor knows no secrets.
func (r *Redactor) String(s string) string {
	s = URLs(s)
	if r == nil {
		return s
	}
	for _, v := range r.values {
		if len(v) >= wordLen {
			s = strings.ReplaceAll(s, v, Mask)
		} else {
			s = replaceWord(s, v)
		}
	}
	return s
}

// Error returns err with its message redacted by String, or err itself when
// nothing was removed (and nil for nil). The result unwraps to err, so
// errors.Is and errors.As (outbox.IsPermanent) still see what err wraps.
func (r *Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := r.String(msg)
	if clean == msg {
		return err
	}
	return WithMessage(err, clean)
}

// WithMessage returns an error whose message is msg (err's, with secrets
// removed) and that unwraps to err.
func WithMessage(err error, msg string) error { return &redacted{msg: msg, err: err} }

// redacted is an error whose message had secrets removed; it unwraps to the
// original.
type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// SensitiveParam reports whether a URL query parameter's name says it holds
// a credential (password, secret, token, key, auth, cred, sig).
func SensitiveParam(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"pass", "secret", "token", "key", "auth", "cred", "sig"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

var (
	// urlInText is a URL inside text: a scheme, "://", and what follows up
	// to a space, a quote or an angle bracket.
	urlInText = regexp.MustCompile("(?i)[a-z][a-z0-9+.-]*://[^\\s\"'<>`]+")
	// sqlDSN is a go-sql-driver DSN's credentials: user:password@net(.
	sqlDSN = regexp.MustCompile(`([^\s:@/(]*):([^\s@]+)@([a-z0-9]*\()`)
)

// URLs returns s with every URL in it reduced to what may be shown (see
// the package doc) and every go-sql-driver DSN's password masked.
func URLs(s string) string {
	s = urlInText.ReplaceAllStringFunc(s, oneURL)
	return sqlDSN.ReplaceAllString(s, "${1}:"+Mask+"@${3}")
}

// oneURL masks the password, the fragment and the credential-named query
// values of one URL found in text; of an http or https URL (a webhook,
// where any part may be a token), the whole user information, every query
// value and the path.
func oneURL(raw string) string {
	scheme, rest, _ := strings.Cut(raw, "://")
	web := strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https")
	auth := authority(rest)
	tail := rest[len(auth):]
	if at := strings.LastIndex(auth, "@"); at >= 0 {
		user, _, hasPW := strings.Cut(auth[:at], ":")
		switch {
		case web: // an http user name may be a token
			auth = Mask + auth[at:]
		case hasPW:
			auth = user + ":" + Mask + auth[at:]
		}
	}
	path, query, hasQuery := strings.Cut(tail, "?")
	hasFrag := false
	if hasQuery {
		query, _, hasFrag = strings.Cut(query, "#")
	} else {
		path, _, hasFrag = strings.Cut(path, "#")
	}
	if web && len(path) > 1 {
		path = "/" + Mask
	}
	var b strings.Builder
	b.WriteString(scheme + "://" + auth + path)
	if hasQuery {
		b.WriteByte('?')
		for i, kv := range strings.Split(query, "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			k, _, hasV := strings.Cut(kv, "=")
			if hasV && (web || SensitiveParam(k)) {
				kv = k + "=" + Mask
			}
			b.WriteString(kv)
		}
	}
	if hasFrag {
		b.WriteString("#" + Mask)
	}
	return b.String()
}

// authority returns the part of a URL after "://" that names the host (and
// user), up to the first '/', '?' or '#'.
func authority(rest string) string {
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		return rest[:i]
	}
	return rest
}

// replaceWord replaces v in s where it is not next to a letter or digit.
func replaceWord(s, v string) string {
	var b strings.Builder
	done := 0 // s[:done] is written
	for from := 0; ; {
		i := strings.Index(s[from:], v)
		if i < 0 {
			break
		}
		i += from
		end := i + len(v)
		if !alnumAt(s, i-1) && !alnumAt(s, end) {
			b.WriteString(s[done:i] + Mask)
			done = end
		}
		from = end
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

func alnumAt(s string, i int) bool {
	if i < 0 || i >= len(s) {
		return false
	}
	c := s[i]
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
