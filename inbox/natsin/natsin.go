package natsin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/internal/consume"
)

type config struct {
	consume.Config
	deadJS      jetstream.JetStream
	deadSubject string
	pullExpiry  time.Duration
}

// DefaultPullExpiry is how long one pull request waits on the server when
// WithPullExpiry is not given.
const DefaultPullExpiry = 10 * time.Second

// Option configures a [Consumer].
type Option func(*config)

// WithConcurrency sets how many messages are processed at once.
// Default: inbox.DefaultConcurrency (1).
func WithConcurrency(n int) Option { return func(c *config) { c.Concurrency = n } }

// WithOrderedKeys, when on, processes the messages of one key (the
// aggregate id) one at a time, in the order this consumer received them,
// while messages of different keys run concurrently. A failing message then
// holds back its key's later messages until it succeeds or is
// dead-lettered (and, once a few of them wait, the reading of new messages).
// Order holds within one Consumer; with several instances
// on one JetStream consumer, keys are not partitioned between them.
// Default: off.
func WithOrderedKeys(on bool) Option { return func(c *config) { c.Ordered = on } }

// WithMaxAttempts sets how many times the handler runs on a message,
// counting earlier deliveries (the JetStream delivery count), before the
// message is dead-lettered. Default: inbox.DefaultMaxAttempts (5).
func WithMaxAttempts(n int) Option { return func(c *config) { c.MaxAttempts = n } }

// WithRetryBackoff sets the delay between two runs of a failing handler:
// base × 2^(attempt-1), at most cap, ±20% jitter. While it waits, the
// consumer tells JetStream the message is in progress. Default:
// inbox.DefaultRetryBase (100 ms) and inbox.DefaultRetryCap (10 s).
func WithRetryBackoff(base, cap time.Duration) Option {
	return func(c *config) { c.RetryBase, c.RetryCap = base, cap }
}

// WithDeadLetter publishes a message whose handler failed WithMaxAttempts
// times (or returned an outbox.Permanent error) to subject, through js,
// with its headers (Nats-* headers removed, so a stream's duplicate window
// cannot swallow it) and the inbox.HeaderDead* headers; then it
// acknowledges the original. A stream must capture subject. Default: none:
// the message is retried at the capped backoff until it succeeds, never dropped.
func WithDeadLetter(js jetstream.JetStream, subject string) Option {
	return func(c *config) { c.deadJS, c.deadSubject = js, subject }
}

// WithPullExpiry sets how long each pull request waits on the server. The
// server sends a heartbeat every quarter of it while it has nothing to
// deliver; a consumer that hears nothing for half of it (a partition, a
// server that lost the request) logs a warning and pulls again instead of
// stalling. Default: DefaultPullExpiry (10 s); from 2 s to 2 min.
func WithPullExpiry(d time.Duration) Option { return func(c *config) { c.pullExpiry = d } }

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.Logger = l } }

// WithHooks adds observers of every finished delivery. Default: none.
func WithHooks(hooks ...inbox.HookDelivery) Option {
	return func(c *config) { c.Hooks = append(c.Hooks, hooks...) }
}

// Consumer runs a handler through an inbox for the messages of a JetStream
// pull consumer, and acknowledges each message (a double ack, which waits
// for the server's confirmation) only after the inbox transaction committed
// or found it a duplicate. Safe for concurrent use; Run may be called once
// at a time.
type Consumer struct {
	cons   jetstream.Consumer
	cfg    config
	engine *consume.Engine
}

// New returns a consumer of cons (a durable pull consumer with explicit
// acks, created by the caller) that processes each message with h through
// in. It returns an error naming every invalid option. It panics if cons,
// in or h is nil, a programmer error.
func New(cons jetstream.Consumer, in *inbox.Inbox, h inbox.Handler, opts ...Option) (*Consumer, error) {
	if cons == nil || in == nil || h == nil {
		panic("natsin: New with a nil consumer, inbox or handler")
	}
	cfg := config{Config: consume.DefaultConfig(), pullExpiry: DefaultPullExpiry}
	for _, o := range opts {
		o(&cfg)
	}
	errs := []error{cfg.Validate()}
	if cfg.pullExpiry < 2*time.Second || cfg.pullExpiry > 2*time.Minute {
		errs = append(errs, fmt.Errorf("WithPullExpiry: %v is outside 2s to 2m", cfg.pullExpiry))
	}
	if cfg.deadSubject != "" && cfg.deadJS == nil || cfg.deadJS != nil && cfg.deadSubject == "" {
		errs = append(errs, errors.New("WithDeadLetter: needs both a JetStream and a subject"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("natsin: new: %w", err)
	}
	return &Consumer{cons: cons, cfg: cfg, engine: consume.New(cfg.Config, in, h, "natsin")}, nil
}

// Run consumes until ctx is cancelled, then waits for the messages in
// flight (their transactions are cancelled and they are given back with a
// nak, unless already committed, in which case they are acknowledged) and
// returns nil. It returns an error when the pull subscription ends for
// another reason (the consumer was deleted, the connection closed).
func (c *Consumer) Run(ctx context.Context) error {
	it, err := c.cons.Messages(jetstream.PullMaxMessages(2*c.cfg.Concurrency),
		jetstream.PullExpiry(c.cfg.pullExpiry), jetstream.PullHeartbeat(c.cfg.pullExpiry/4))
	if err != nil {
		return fmt.Errorf("natsin: subscribe: %w", err)
	}
	pool := c.engine.Start(ctx)
	c.engine.Log().Info("consumer started")
	defer func() {
		it.Stop() // fetch no more, then let the workers finish
		pool.Close()
		c.engine.Log().Info("consumer stopped")
	}()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			if m != nil {
				_ = m.Nak()
			}
			return nil
		}
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			// The iterator forgot its pending pull and pulls again at the
			// next call: a missed heartbeat is a stall, not an end.
			c.engine.Log().Warn("no heartbeat from the server, pulling again",
				slog.Duration("silent_for", c.cfg.pullExpiry/2))
			continue
		}
		if err != nil {
			return fmt.Errorf("natsin: next message: %w", err)
		}
		if err := pool.Submit(ctx, c.delivery(m)); err != nil {
			return nil // ctx ended; Submit gave the message back
		}
	}
}

// delivery decodes m: the standard outbox headers, else Nats-Msg-Id for the id.
func (c *Consumer) delivery(m jetstream.Msg) *delivery {
	h := make(map[string]string, len(m.Headers()))
	for k, v := range m.Headers() {
		if len(v) > 0 {
			h[k] = v[0]
		}
	}
	msg := consume.MessageFromHeaders(h, m.Data())
	msg.ContentType = h["Content-Type"] // natspub.HeaderContentType
	if msg.MessageID == "" {
		msg.MessageID = h[jetstream.MsgIDHeader]
	}
	msg.Topic = m.Subject()
	d := &delivery{m: m, msg: msg, c: c}
	if meta, err := m.Metadata(); err == nil {
		d.prior = int(meta.NumDelivered) - 1
		msg.CreatedAt = meta.Timestamp
	}
	return d
}

type delivery struct {
	m     jetstream.Msg
	msg   *outbox.Message
	prior int
	c     *Consumer
}

func (d *delivery) Message() *outbox.Message { return d.msg }

func (d *delivery) Key() string {
	if k := d.msg.Key(); k != "" {
		return k
	}
	return d.m.Subject()
}

func (d *delivery) Prior() int                    { return d.prior }
func (d *delivery) Ack(ctx context.Context) error { return d.m.DoubleAck(ctx) }
func (d *delivery) Abandon()                      { _ = d.m.Nak() }
func (d *delivery) Extend()                       { _ = d.m.InProgress() }

func (d *delivery) DeadLetter(ctx context.Context, dead consume.Dead) error {
	if d.c.cfg.deadJS == nil {
		return consume.ErrNoDeadLetter
	}
	hdr := nats.Header{}
	for k, v := range dead.Headers(d.msg.Headers) {
		if !strings.HasPrefix(k, "Nats-") {
			hdr.Set(k, v)
		}
	}
	_, err := d.c.cfg.deadJS.PublishMsg(ctx, &nats.Msg{Subject: d.c.cfg.deadSubject, Header: hdr, Data: d.m.Data()})
	return err
}
