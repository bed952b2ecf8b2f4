package amqpin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/internal/consume"
)

// ErrDeliveriesClosed is returned by [Consumer.Run] when RabbitMQ closed the
// channel or the connection under it. Messages that were not acknowledged
// are delivered again; run the consumer again on a new connection.
var ErrDeliveriesClosed = errors.New("amqpin: delivery channel closed")

type deadMode int

const (
	deadNone deadMode = iota
	deadPublish
	deadReject
)

type config struct {
	consume.Config
	prefetch     int
	dead         deadMode
	deadExchange string
	deadKey      string
}

// Option configures a [Consumer].
type Option func(*config)

// WithConcurrency sets how many messages are processed at once.
// Default: inbox.DefaultConcurrency (1).
func WithConcurrency(n int) Option { return func(c *config) { c.Concurrency = n } }

// WithOrderedKeys, when on, processes the messages of one key (the
// outbox-aggregate-id header, else the routing key) one at a time, in the
// order this consumer received them, while messages of different keys run
// concurrently. A failing message then holds back its key's later messages
// until it succeeds or is dead-lettered (and, once a few of them wait, the
// reading of new messages). Order holds within one Consumer on
// one queue; for several instances, use a single-active-consumer queue.
// Default: off.
func WithOrderedKeys(on bool) Option { return func(c *config) { c.Ordered = on } }

// WithMaxAttempts sets how many times the handler runs on a message before
// it is dead-lettered. Earlier deliveries count when the queue reports them
// (the x-delivery-count header of quorum queues; a classic queue only says
// "redelivered", counted as one). Default: inbox.DefaultMaxAttempts (5).
func WithMaxAttempts(n int) Option { return func(c *config) { c.MaxAttempts = n } }

// WithRetryBackoff sets the delay between two runs of a failing handler:
// base × 2^(attempt-1), at most cap, ±20% jitter. Default:
// inbox.DefaultRetryBase (100 ms) and inbox.DefaultRetryCap (10 s).
func WithRetryBackoff(base, cap time.Duration) Option {
	return func(c *config) { c.RetryBase, c.RetryCap = base, cap }
}

// WithPrefetch sets how many unacknowledged messages RabbitMQ sends ahead
// (basic.qos). Default: twice the concurrency.
func WithPrefetch(n int) Option { return func(c *config) { c.prefetch = n } }

// WithDeadLetter publishes a message whose handler failed WithMaxAttempts
// times (or returned an outbox.Permanent error) to exchange with routingKey,
// persistent, mandatory and confirmed, with its properties and headers plus
// the inbox.HeaderDead* headers; then it acknowledges the original. An
// unroutable dead letter is an error, retried with backoff. Default: none:
// the message is retried at the capped backoff until it succeeds, never
// dropped (mind RabbitMQ's consumer_timeout, 30 minutes by default, which
// closes a channel that holds a message that long).
func WithDeadLetter(exchange, routingKey string) Option {
	return func(c *config) { c.dead, c.deadExchange, c.deadKey = deadPublish, exchange, routingKey }
}

// WithDeadLetterReject rejects an exhausted message without requeueing it,
// so that RabbitMQ moves it to the queue's own dead-letter exchange
// (x-dead-letter-exchange), atomically, with an x-death header but without
// the inbox.HeaderDead* headers. A queue without a dead-letter exchange
// drops the message: configure one. Default: off.
func WithDeadLetterReject() Option { return func(c *config) { c.dead = deadReject } }

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.Logger = l } }

// WithHooks adds observers of every finished delivery. Default: none.
func WithHooks(hooks ...inbox.HookDelivery) Option {
	return func(c *config) { c.Hooks = append(c.Hooks, hooks...) }
}

// Consumer runs a handler through an inbox for the messages of a RabbitMQ
// queue and acknowledges each message only after the inbox transaction
// committed or found it a duplicate. Safe for concurrent use; Run may be
// called once at a time.
type Consumer struct {
	conn   *amqp.Connection
	queue  string
	cfg    config
	engine *consume.Engine
}

// New returns a consumer of queue on conn (the caller's connection, never
// closed by the consumer) that processes each message with h through in.
// It returns an error naming every invalid option. It panics if conn, in or
// h is nil, a programmer error.
func New(conn *amqp.Connection, queue string, in *inbox.Inbox, h inbox.Handler, opts ...Option) (*Consumer, error) {
	if conn == nil || in == nil || h == nil {
		panic("amqpin: New with a nil connection, inbox or handler")
	}
	cfg := config{Config: consume.DefaultConfig()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.prefetch == 0 {
		cfg.prefetch = 2 * cfg.Concurrency
	}
	errs := []error{cfg.Validate()}
	if queue == "" {
		errs = append(errs, errors.New("queue name is empty"))
	}
	if cfg.prefetch < 1 {
		errs = append(errs, fmt.Errorf("WithPrefetch: %d is less than 1", cfg.prefetch))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("amqpin: new: %w", err)
	}
	return &Consumer{conn: conn, queue: queue, cfg: cfg, engine: consume.New(cfg.Config, in, h, "amqpin")}, nil
}

// Run consumes on a channel of its own until ctx is cancelled, then waits
// for the messages in flight (their transactions are cancelled and they are
// requeued, unless already committed, in which case they are acknowledged),
// closes its channels and returns nil. It returns ErrDeliveriesClosed when
// RabbitMQ closes the channel or connection first.
func (c *Consumer) Run(ctx context.Context) error {
	ch, err := c.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpin: open channel: %w", err)
	}
	defer ch.Close()
	if err := ch.Qos(c.cfg.prefetch, 0, false); err != nil {
		return fmt.Errorf("amqpin: qos: %w", err)
	}
	// No context on the subscription: amqp091 would cancel it from a
	// goroutine of its own, racing the Close below for the channel's replies.
	tag := "amqpin-" + outbox.NewMessageID()
	deliveries, err := ch.Consume(c.queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqpin: consume %s: %w", c.queue, err)
	}
	dl := &deadLetterer{c: c}
	pool := c.engine.Start(ctx)
	c.engine.Log().Info("consumer started", slog.String("queue", c.queue))
	defer func() {
		// In order: stop the subscription, let the workers finish (they ack
		// on ch), then close the channels, which requeues what was prefetched
		// but never handed to a worker.
		_ = ch.Cancel(tag, false)
		for range deliveries { // amqp091 closes it once its buffer is empty
		}
		pool.Close()
		dl.close()
		c.engine.Log().Info("consumer stopped", slog.String("queue", c.queue))
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return ErrDeliveriesClosed
			}
			if err := pool.Submit(ctx, c.delivery(d, dl)); err != nil {
				return nil
			}
		}
	}
}

func (c *Consumer) delivery(d amqp.Delivery, dl *deadLetterer) *delivery {
	h := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		switch v := v.(type) {
		case string:
			h[k] = v
		case []byte:
			h[k] = string(v)
		default:
			h[k] = fmt.Sprint(v)
		}
	}
	msg := consume.MessageFromHeaders(h, d.Body)
	msg.ContentType = d.ContentType
	if d.MessageId != "" {
		msg.MessageID = d.MessageId
	}
	msg.Topic = d.RoutingKey
	msg.CreatedAt = d.Timestamp
	prior := 0
	switch n := d.Headers["x-delivery-count"].(type) { // quorum queues
	case int64:
		prior = int(n)
	case int32:
		prior = int(n)
	default:
		if d.Redelivered {
			prior = 1
		}
	}
	return &delivery{d: d, msg: msg, prior: prior, dl: dl}
}

type delivery struct {
	d       amqp.Delivery
	msg     *outbox.Message
	prior   int
	dl      *deadLetterer
	settled bool // rejected to the queue's dead-letter exchange: acking again would close the channel
}

func (d *delivery) Message() *outbox.Message { return d.msg }

func (d *delivery) Key() string {
	if k := d.msg.Key(); k != "" {
		return k
	}
	return d.d.RoutingKey
}

func (d *delivery) Prior() int { return d.prior }

func (d *delivery) Ack(context.Context) error {
	if d.settled {
		return nil
	}
	return d.d.Ack(false)
}

func (d *delivery) Abandon() { _ = d.d.Nack(false, true) }
func (d *delivery) Extend()  {}

func (d *delivery) DeadLetter(ctx context.Context, dead consume.Dead) error {
	return d.dl.send(ctx, d, dead)
}

// deadLetterer publishes dead letters on a confirm-mode channel of its own,
// opened on first use, one at a time (dead letters are rare).
type deadLetterer struct {
	c       *Consumer
	mu      sync.Mutex
	ch      *amqp.Channel
	returns chan amqp.Return
}

func (l *deadLetterer) send(ctx context.Context, d *delivery, dead consume.Dead) error {
	switch l.c.cfg.dead {
	case deadNone:
		return consume.ErrNoDeadLetter
	case deadReject:
		if err := d.d.Reject(false); err != nil {
			return fmt.Errorf("reject: %w", err)
		}
		d.settled = true
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ch == nil || l.ch.IsClosed() {
		ch, err := l.c.conn.Channel()
		if err != nil {
			return fmt.Errorf("open dead-letter channel: %w", err)
		}
		if err := ch.Confirm(false); err != nil {
			ch.Close()
			return fmt.Errorf("confirm mode: %w", err)
		}
		l.ch, l.returns = ch, ch.NotifyReturn(make(chan amqp.Return, 1))
	}
	headers := amqp.Table{}
	for k, v := range d.d.Headers {
		headers[k] = v
	}
	for k, v := range dead.Headers(nil) {
		headers[k] = v
	}
	pub := amqp.Publishing{
		Headers: headers, ContentType: d.d.ContentType, ContentEncoding: d.d.ContentEncoding,
		DeliveryMode: amqp.Persistent, CorrelationId: d.d.CorrelationId, MessageId: d.d.MessageId,
		Timestamp: d.d.Timestamp, Type: d.d.Type, AppId: d.d.AppId, Body: d.d.Body,
	}
	conf, err := l.ch.PublishWithDeferredConfirmWithContext(ctx, l.c.cfg.deadExchange, l.c.cfg.deadKey, true, false, pub)
	if err != nil {
		return fmt.Errorf("publish dead letter: %w", err)
	}
	acked, err := conf.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("confirm dead letter: %w", err)
	}
	select { // a mandatory message that found no queue comes back before its ack
	case r := <-l.returns:
		return fmt.Errorf("dead letter unroutable: %d %s (exchange %q, key %q)", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
	default:
	}
	if !acked {
		return errors.New("dead letter nacked by the broker")
	}
	return nil
}

func (l *deadLetterer) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ch != nil {
		l.ch.Close()
	}
}
