package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/redact"
)

// The daemon keeps secrets out of every text it lets go, at the edge, whatever
// the drivers and clients put in their errors: each broker's publisher is
// wrapped (redactPublisher), so that a publish or ping error is clean before
// the relay logs it, writes it to last_error or sets it as a span's status,
// and before /readyz shows it; the logger is wrapped (redactHandler), which
// covers what clients log on their own; and errors Run and OpenDB return are
// redacted. What is removed: see package internal/redact.

// redactorOf returns a Redactor that knows the secrets: database DSNs and
// broker URLs (webhook URLs with all their query values and long path
// segments), signing secrets and header values.
func redactorOf(secrets ...config.Secret) *redact.Redactor {
	r := &redact.Redactor{}
	for _, s := range secrets {
		if s.IsZero() {
			continue
		}
		switch scheme := s.Scheme(); scheme {
		case "":
			r.AddURL(s.Value(), false) // a go-sql-driver DSN, or not a URL at all
			r.AddValue(s.Value())
		default:
			r.AddURL(s.Value(), scheme == "http" || scheme == "https")
		}
	}
	return r
}

// configSecrets lists every secret of cfg.
func configSecrets(cfg *config.Config) []config.Secret {
	secrets := []config.Secret{cfg.DB, config.NewSecret(cfg.TraceEndpoint)}
	for _, b := range cfg.EffectiveBrokers() {
		secrets = append(secrets, brokerSecrets(&b)...)
	}
	return secrets
}

// brokerSecrets lists the secrets of one broker.
func brokerSecrets(b *config.Broker) []config.Secret {
	secrets := []config.Secret{b.URL, b.Secret}
	for _, v := range b.Headers {
		secrets = append(secrets, v)
	}
	return secrets
}

// scrub returns err with every secret of secrets (and the secret parts of
// any URL in it) removed from its message; it unwraps to err.
func scrub(err error, secrets ...config.Secret) error {
	if err == nil {
		return nil
	}
	return redactorOf(secrets...).Error(err)
}

// redactPublisher cleans the errors of a broker's publisher.
type redactPublisher struct {
	pub outbox.Publisher
	red *redact.Redactor
}

// redactPingPublisher is a redactPublisher whose publisher has Ping.
type redactPingPublisher struct {
	*redactPublisher
	ping outbox.Pinger
}

// redactErrors wraps pub so that its errors (and its Ping's, when it has
// one) have red's secrets removed.
func redactErrors(pub outbox.Publisher, red *redact.Redactor) outbox.Publisher {
	p := &redactPublisher{pub: pub, red: red}
	if pinger, ok := pub.(outbox.Pinger); ok {
		return &redactPingPublisher{redactPublisher: p, ping: pinger}
	}
	return p
}

func (p *redactPublisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	errs := p.pub.Publish(ctx, msgs)
	for i, err := range errs {
		errs[i] = p.red.Error(err)
	}
	return errs
}

// Unwrap returns the wrapped publisher.
func (p *redactPublisher) Unwrap() outbox.Publisher { return p.pub }

func (p *redactPingPublisher) Ping(ctx context.Context) error { return p.red.Error(p.ping.Ping(ctx)) }

// redactHandler removes secrets from every record's message and string or
// error attributes before h writes it.
type redactHandler struct {
	h   slog.Handler
	red *redact.Redactor
}

// redactLogs returns log with every record redacted by red.
func redactLogs(log *slog.Logger, red *redact.Redactor) *slog.Logger {
	return slog.New(redactHandler{h: log.Handler(), red: red})
}

func (r redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, r.red.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.attr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = r.attr(a)
	}
	return redactHandler{h: r.h.WithAttrs(clean), red: r.red}
}

func (r redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{h: r.h.WithGroup(name), red: r.red}
}

// attr returns a with its strings redacted; an error or a fmt.Stringer
// becomes its redacted text.
func (r redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, r.red.String(v.String()))
	case slog.KindGroup:
		group := v.Group()
		clean := make([]slog.Attr, len(group))
		for i, g := range group {
			clean[i] = r.attr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(clean...)}
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, r.red.String(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, r.red.String(x.String()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
