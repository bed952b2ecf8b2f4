// Package consume is the engine the broker consumers of package inbox share:
// workers (optionally one lane per key hash, for per-key order), the retry
// loop around inbox.Process, dead-lettering, and acknowledging the broker
// only after the inbox transaction committed.
package consume

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
)

// ErrNoDeadLetter is returned by [Delivery.DeadLetter] when the consumer has
// no dead-letter destination.
var ErrNoDeadLetter = errors.New("no dead-letter destination")

// Log attribute keys of the consumers (the same names as the inbox's).
const (
	attrMessageID = "message_id"
	attrAttempt   = "attempt"
	AttrError     = "error"
	AttrDelay     = "delay"
)

// laneBuffer is how many deliveries wait in an ordered lane.
const laneBuffer = 8

// ackTimeout bounds an acknowledgement, which runs even after shutdown began
// so that a committed message is not delivered again needlessly.
const ackTimeout = 5 * time.Second

// Delivery is one message received from a broker. The engine ends every
// delivery it was given with exactly one call of Ack or Abandon.
type Delivery interface {
	// Message is the decoded message; its MessageID may be empty (the inbox
	// then refuses it as permanent).
	Message() *outbox.Message
	// Key is the ordering key: deliveries with one key go to one lane when
	// ordering is on.
	Key() string
	// Prior is how many times the broker delivered the message before
	// (0 when the broker does not say).
	Prior() int
	// Ack tells the broker the message is done (processed, a duplicate, or
	// dead-lettered).
	Ack(ctx context.Context) error
	// Abandon gives up on the message without acknowledging it, because
	// the consumer is stopping: the broker delivers it again later.
	Abandon()
	// DeadLetter sends the message to the dead-letter destination, or
	// returns ErrNoDeadLetter. The engine acknowledges it afterwards.
	DeadLetter(ctx context.Context, d Dead) error
	// Extend asks the broker to wait longer before it redelivers the
	// message (the handler is being retried). It may do nothing.
	Extend()
}

// Dead describes why a message is dead-lettered.
type Dead struct {
	Consumer string
	Attempts int
	Err      error
}

// Headers returns base plus the dead-letter headers, as a new map.
func (d Dead) Headers(base map[string]string) map[string]string {
	h := make(map[string]string, len(base)+3)
	for k, v := range base {
		h[k] = v
	}
	h[inbox.HeaderDeadReason] = d.Err.Error()
	h[inbox.HeaderDeadAttempts] = strconv.Itoa(d.Attempts)
	h[inbox.HeaderDeadConsumer] = d.Consumer
	return h
}

// Config holds the options every consumer shares.
type Config struct {
	Concurrency int
	Ordered     bool
	MaxAttempts int
	RetryBase   time.Duration
	RetryCap    time.Duration
	Logger      *slog.Logger
	Hooks       []inbox.HookDelivery
}

// DefaultConfig returns the shared defaults (inbox.Default*).
func DefaultConfig() Config {
	return Config{
		Concurrency: inbox.DefaultConcurrency,
		MaxAttempts: inbox.DefaultMaxAttempts,
		RetryBase:   inbox.DefaultRetryBase,
		RetryCap:    inbox.DefaultRetryCap,
		Logger:      slog.New(slog.DiscardHandler),
	}
}

// Validate returns every invalid option, each named after its With function.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Concurrency >= 1 && c.Concurrency <= 10_000, "WithConcurrency: %d is not between 1 and 10000", c.Concurrency)
	check(c.MaxAttempts >= 1, "WithMaxAttempts: %d is less than 1", c.MaxAttempts)
	check(c.RetryBase > 0 && c.RetryCap >= c.RetryBase, "WithRetryBackoff: %v..%v is not a positive range", c.RetryBase, c.RetryCap)
	check(c.Logger != nil, "WithLogger: logger is nil")
	return errors.Join(errs...)
}

// MessageFromHeaders rebuilds an outbox message from its standard headers
// (outbox.Message.StandardHeaders) and payload. The message keeps all
// headers in Headers.
func MessageFromHeaders(h map[string]string, payload []byte) *outbox.Message {
	return &outbox.Message{
		MessageID:     h[outbox.HeaderMessageID],
		AggregateType: h[outbox.HeaderAggregateType],
		AggregateID:   h[outbox.HeaderAggregateID],
		EventType:     h[outbox.HeaderEventType],
		Payload:       payload,
		Headers:       h,
	}
}

// Engine runs a handler through an inbox for the deliveries it is given.
type Engine struct {
	cfg Config
	in  *inbox.Inbox
	h   inbox.Handler
	log *slog.Logger
}

// New returns an engine. cfg must be valid.
func New(cfg Config, in *inbox.Inbox, h inbox.Handler, component string) *Engine {
	return &Engine{cfg: cfg, in: in, h: h,
		log: cfg.Logger.With("component", component, "consumer", in.Consumer())}
}

// Log returns the engine's logger, for the adapter's own messages.
func (e *Engine) Log() *slog.Logger { return e.log }

// Pool is a running set of workers. Submit and Close may not be called
// concurrently with each other.
type Pool struct {
	lanes []chan Delivery
	wg    sync.WaitGroup
}

// Start starts the workers; they process deliveries with ctx, so cancelling
// it aborts the transactions in flight (their messages are abandoned and
// delivered again later). Close the pool to wait for them.
func (e *Engine) Start(ctx context.Context) *Pool {
	p := &Pool{}
	n := e.cfg.Concurrency
	if e.cfg.Ordered {
		// A small buffer per lane lets a slow key hold back its own lane
		// without stopping the reader at once.
		p.lanes = make([]chan Delivery, n)
		for i := range p.lanes {
			p.lanes[i] = make(chan Delivery, laneBuffer)
		}
	} else {
		p.lanes = []chan Delivery{make(chan Delivery)}
	}
	for i := range n {
		lane := p.lanes[i%len(p.lanes)]
		p.wg.Go(func() {
			for d := range lane {
				e.handle(ctx, d)
			}
		})
	}
	return p
}

// Submit hands d to a worker (with ordering, to the lane of d's key) and
// blocks until a worker or the lane's buffer takes it. When ctx is done
// first, it abandons d and returns ctx's error.
func (p *Pool) Submit(ctx context.Context, d Delivery) error {
	lane := p.lanes[0]
	if len(p.lanes) > 1 {
		h := fnv.New32a()
		h.Write([]byte(d.Key()))
		lane = p.lanes[h.Sum32()%uint32(len(p.lanes))]
	}
	if err := ctx.Err(); err != nil { // select would pick at random between a ready lane and ctx
		d.Abandon()
		return err
	}
	select {
	case lane <- d:
		return nil
	case <-ctx.Done():
		d.Abandon()
		return ctx.Err()
	}
}

// Close stops taking deliveries and waits for the workers to finish theirs.
func (p *Pool) Close() {
	for _, l := range p.lanes {
		close(l)
	}
	p.wg.Wait()
}

// handle sees one delivery through: process, retry, dead-letter, ack.
func (e *Engine) handle(ctx context.Context, d Delivery) {
	msg := d.Message()
	attempts := d.Prior() // handler runs that failed, counting earlier deliveries
	outages := 0          // consecutive failures of the inbox itself
	for {
		out, err := e.process(ctx, msg)
		if err == nil {
			e.ack(ctx, d, msg)
			if out == inbox.Processed {
				attempts++
			}
			e.report(inbox.DeliveryEvent{Message: msg, Outcome: out, Attempts: attempts})
			return
		}
		if ctx.Err() != nil {
			d.Abandon()
			return
		}
		var he *inbox.HandlerError
		if !errors.As(err, &he) && !outbox.IsPermanent(err) {
			// The database failed, not the message: wait without spending its attempts.
			outages++
			delay := e.backoff(outages)
			e.log.LogAttrs(ctx, slog.LevelWarn, "inbox unavailable, will retry",
				slog.String(attrMessageID, msg.MessageID), slog.String(AttrError, err.Error()), slog.Duration(AttrDelay, delay))
			if !e.wait(ctx, d, delay) {
				return
			}
			continue
		}
		outages = 0
		attempts++
		exhausted := outbox.IsPermanent(err) || attempts >= e.cfg.MaxAttempts
		if exhausted {
			if done := e.deadLetter(ctx, d, msg, Dead{Consumer: e.in.Consumer(), Attempts: attempts, Err: err}); done {
				return
			}
		}
		delay := e.backoff(attempts)
		level := slog.LevelWarn
		if exhausted {
			level = slog.LevelError // no dead-letter destination: retried until it succeeds
		}
		e.log.LogAttrs(ctx, level, "handler failed, will retry",
			slog.String(attrMessageID, msg.MessageID), slog.Int(attrAttempt, attempts),
			slog.String(AttrError, err.Error()), slog.Duration(AttrDelay, delay))
		if !e.wait(ctx, d, delay) {
			return
		}
	}
}

// process runs the inbox; a panicking handler counts as a failing one.
func (e *Engine) process(ctx context.Context, msg *outbox.Message) (out inbox.Outcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = 0, &inbox.HandlerError{Err: fmt.Errorf("panic: %v", r)}
		}
	}()
	return e.in.Process(ctx, msg, e.h)
}

// deadLetter moves msg to the dead-letter destination and acknowledges it,
// retrying the move until it succeeds. It returns false, having done
// nothing, when there is no destination, and true when d is finished
// (acknowledged, or abandoned because ctx ended).
func (e *Engine) deadLetter(ctx context.Context, d Delivery, msg *outbox.Message, dead Dead) bool {
	for try := 1; ; try++ {
		err := d.DeadLetter(ctx, dead)
		if errors.Is(err, ErrNoDeadLetter) {
			return false
		}
		if err == nil {
			e.log.LogAttrs(ctx, slog.LevelError, "message dead-lettered",
				slog.String(attrMessageID, msg.MessageID), slog.Int(attrAttempt, dead.Attempts),
				slog.String(AttrError, dead.Err.Error()))
			e.ack(ctx, d, msg)
			e.report(inbox.DeliveryEvent{Message: msg, DeadLettered: true, Attempts: dead.Attempts, Err: dead.Err})
			return true
		}
		delay := e.backoff(try)
		e.log.LogAttrs(ctx, slog.LevelWarn, "dead-letter failed, will retry",
			slog.String(attrMessageID, msg.MessageID), slog.String(AttrError, err.Error()), slog.Duration(AttrDelay, delay))
		if !e.wait(ctx, d, delay) {
			return true
		}
	}
}

// ack acknowledges d even when shutdown began: the work is committed.
func (e *Engine) ack(ctx context.Context, d Delivery, msg *outbox.Message) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	if err := d.Ack(actx); err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, "ack failed, the broker will deliver the message again",
			slog.String(attrMessageID, msg.MessageID), slog.String(AttrError, err.Error()))
	}
}

func (e *Engine) report(ev inbox.DeliveryEvent) {
	for _, h := range e.cfg.Hooks {
		h.OnDelivery(ev)
	}
}

// wait extends d and waits for delay; when ctx ends first it abandons d
// and returns false.
func (e *Engine) wait(ctx context.Context, d Delivery, delay time.Duration) bool {
	d.Extend()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		d.Abandon()
		return false
	case <-t.C:
		d.Extend()
		return true
	}
}

// backoff is base × 2^(n-1), at most cap, with ±20% jitter.
func (e *Engine) backoff(n int) time.Duration {
	b := e.cfg.RetryBase
	for i := 1; i < n && b < e.cfg.RetryCap; i++ {
		b *= 2
	}
	b = min(b, e.cfg.RetryCap)
	return b + time.Duration((rand.Float64()*0.4-0.2)*float64(b))
}
