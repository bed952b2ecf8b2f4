package amqppub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/probe"
)

// Defaults of the Publisher's options.
const (
	// DefaultMaxPayloadSize is the largest payload (the AMQP body) Publish sends (16 MiB, the
	// default max_message_size of RabbitMQ 4); a larger one fails at once
	// with [outbox.Permanent].
	DefaultMaxPayloadSize = 16 << 20
	// DefaultMaxMessageSize is DefaultMaxPayloadSize.
	//
	// Deprecated: use DefaultMaxPayloadSize.
	DefaultMaxMessageSize = DefaultMaxPayloadSize
	// DefaultMaxChannels is how many AMQP channels (so how many concurrent
	// Publish calls) a Publisher uses at most.
	DefaultMaxChannels = 4
	// DefaultDialTimeout bounds one connection attempt of the reconnect loop.
	DefaultDialTimeout = 10 * time.Second
	// DefaultMinBackoff and DefaultMaxBackoff bound the reconnect loop's wait
	// between failed attempts (doubling from min to max).
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// maxShortString is AMQP's limit on an exchange name or routing key.
const maxShortString = 255

// Publisher sends outbox messages to RabbitMQ with publisher confirms. It
// owns its connection: a background loop dials through the DialFunc, and
// dials again whenever the connection is lost. It is safe for concurrent use.
// Call Close when done.
type Publisher struct {
	dial DialFunc
	cfg  config
	log  *slog.Logger

	kick   chan struct{} // asks the reconnect loop to try now
	cancel context.CancelFunc
	loop   sync.WaitGroup // the reconnect loop
	wg     sync.WaitGroup // batches and channel openings that outlived their Publish

	sem chan struct{} // one slot per channel in use

	mu    sync.Mutex
	state *connState
	idle  []*pubChannel // confirm-mode channels ready for a batch
	// ping is the channel opening that every Ping made while it runs waits
	// for: a broker that stops answering holds one goroutine, however often
	// Ping is called.
	ping probe.Shared
}

var (
	_ outbox.Publisher = (*Publisher)(nil)
	_ outbox.Pinger    = (*Publisher)(nil)
)

type config struct {
	exchange       string
	keyPrefix      string
	mandatory      bool
	unroutableDead bool
	maxPayload     int
	maxChannels    int
	dialTimeout    time.Duration
	minBackoff     time.Duration
	maxBackoff     time.Duration
	setup          func(*amqp.Channel) error
	logger         *slog.Logger
}

func defaultConfig() config {
	return config{
		mandatory:   true,
		maxPayload:  DefaultMaxPayloadSize,
		maxChannels: DefaultMaxChannels,
		dialTimeout: DefaultDialTimeout,
		minBackoff:  DefaultMinBackoff,
		maxBackoff:  DefaultMaxBackoff,
		logger:      slog.New(slog.DiscardHandler),
	}
}

func (c *config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(len(c.exchange) <= maxShortString, "WithExchange: name is %d bytes, longer than %d", len(c.exchange), maxShortString)
	check(len(c.keyPrefix) < maxShortString, "WithRoutingKeyPrefix: %d bytes is too long", len(c.keyPrefix))
	check(c.maxPayload > 0, "WithMaxPayloadSize: %d is not positive", c.maxPayload)
	check(c.maxChannels >= 1, "WithMaxChannels: %d is less than 1", c.maxChannels)
	check(c.dialTimeout > 0, "WithDialTimeout: %v is not positive", c.dialTimeout)
	check(c.minBackoff > 0 && c.maxBackoff >= c.minBackoff, "WithReconnectBackoff: %v..%v is not a positive range", c.minBackoff, c.maxBackoff)
	check(c.logger != nil, "WithLogger: logger is nil")
	return errors.Join(errs...)
}

// Option configures a [Publisher].
type Option func(*config)

// WithExchange publishes to the named exchange, which must exist (declare it
// with [WithSetup] or beforehand). Default: "" (the default exchange, which
// routes a message to the queue named by its routing key).
func WithExchange(name string) Option { return func(c *config) { c.exchange = name } }

// WithRoutingKeyPrefix puts prefix in front of every message's destination
// ([outbox.Message.Destination]: its Topic, else its EventType) to make the
// routing key. Default: "" (the destination as is).
func WithRoutingKeyPrefix(prefix string) Option { return func(c *config) { c.keyPrefix = prefix } }

// WithMandatory sets the mandatory flag: when on, a message that no queue
// receives comes back (basic.return, 312 NO_ROUTE) and fails with an error
// marked [outbox.Unroutable] instead of vanishing. Default: true. Turn it
// off only for an exchange where dropping unroutable messages is intended.
func WithMandatory(on bool) Option { return func(c *config) { c.mandatory = on } }

// WithUnroutablePermanent says what a returned (unroutable) message is.
// Off, its error is marked [outbox.Unroutable] only, so the relay retries
// it with backoff up to its attempt limit: a queue bound in the meantime
// (its consumer was being deployed) receives it. On, the error is also
// [outbox.Permanent] and the message is dead at its first attempt, for an
// exchange where no binding means a mistake. The daemon sets it per route
// instead (router.Route.UnroutablePermanent). Default: false.
func WithUnroutablePermanent(on bool) Option { return func(c *config) { c.unroutableDead = on } }

// WithMaxPayloadSize sets the largest payload (the AMQP body) Publish sends; a larger message
// fails alone with [outbox.Permanent] before it reaches the broker (whose
// own max_message_size would close the channel and fail its batch-mates
// too). Set it to the broker's max_message_size. Default:
// DefaultMaxPayloadSize (16 MiB).
func WithMaxPayloadSize(n int) Option { return func(c *config) { c.maxPayload = n } }

// WithMaxMessageSize is [WithMaxPayloadSize].
//
// Deprecated: use WithMaxPayloadSize; the name now says what it measures,
// as redispub's does (mqttpub.WithMaxMessageSize measures its whole envelope).
func WithMaxMessageSize(n int) Option { return WithMaxPayloadSize(n) }

// WithMaxChannels sets how many channels the Publisher opens at most, which
// is how many Publish calls run at once; more wait for a free channel.
// Default: DefaultMaxChannels (4).
func WithMaxChannels(n int) Option { return func(c *config) { c.maxChannels = n } }

// WithDialTimeout bounds one connection attempt. Default: DefaultDialTimeout (10 s).
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// WithReconnectBackoff sets the wait between failed connection attempts,
// doubling from min to max. A Publish or Ping that finds no connection asks
// for an attempt at once (but never sooner than min after the last one).
// Default: DefaultMinBackoff (100 ms) to DefaultMaxBackoff (5 s).
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(c *config) { c.minBackoff, c.maxBackoff = min, max }
}

// WithSetup runs fn on a channel of every new connection before the
// Publisher uses it, e.g. to declare the exchange and queues (declarations
// are idempotent). An error fails that connection attempt. Default: none.
func WithSetup(fn func(ch *amqp.Channel) error) Option { return func(c *config) { c.setup = fn } }

// WithLogger sets the logger for connection events (lost, restored). Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// New returns a Publisher that connects through dial (see [DialURL]) in the
// background and keeps reconnecting until Close. It returns at once: a
// broker that is down shows as [outbox.Unavailable] errors from Publish and
// errors from Ping. New panics if dial is nil, a programmer error.
func New(dial DialFunc, opts ...Option) (*Publisher, error) {
	if dial == nil {
		panic("amqppub: New with a nil DialFunc")
	}
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("amqppub: new publisher: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{
		dial:   dial,
		cfg:    cfg,
		log:    cfg.logger.With("component", "amqppub"),
		kick:   make(chan struct{}, 1),
		cancel: cancel,
		sem:    make(chan struct{}, cfg.maxChannels),
		state:  &connState{err: errors.New("not connected yet"), changed: make(chan struct{})},
	}
	p.loop.Go(func() { p.run(ctx) })
	return p, nil
}

// Dial returns a Publisher on the RabbitMQ at rawURL (amqp:// or amqps://),
// with amqp091-go's default configuration and DefaultHeartbeat; see
// [DialURL] and [New].
func Dial(rawURL string, opts ...Option) (*Publisher, error) {
	dial, err := DialURL(rawURL, amqp.Config{})
	if err != nil {
		return nil, err
	}
	return New(dial, opts...)
}

// Close stops the reconnect loop, closes the connection and waits for what
// the Publisher started (batches abandoned at their deadline end as the
// connection closes). Call it once the last Publish and Ping have returned;
// afterwards they fail with ErrClosed. It is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.state.closed {
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	p.update(func(s *connState) { s.closed = true })
	p.cancel()
	p.loop.Wait()
	p.wg.Wait()
	return nil
}

// RoutingKey returns the routing key m is published with.
func (p *Publisher) RoutingKey(m *outbox.Message) string { return p.cfg.keyPrefix + m.Destination() }

// Publish sends every message on one confirm-mode channel and waits, within
// ctx, for the broker's confirmation of each. It returns one error per
// message, in order: nil when the broker confirmed the message (a persistent
// message routed to durable queues is on disk by then).
//
// Each message is published to the configured exchange with routing key =
// prefix + [outbox.Message.Destination], persistent, mandatory (by default),
// content type application/json, MessageId = the message id, Type = the
// event type, Timestamp = CreatedAt (when set), and the headers of
// [outbox.Message.StandardHeaders] as the headers table.
//
// Errors: a message returned as unroutable (no queue bound to its routing
// key) is [outbox.Unroutable], retried by the relay, and also
// [outbox.Permanent] with [WithUnroutablePermanent]; a message too large
// ([WithMaxPayloadSize]) or with a routing key over 255 bytes is
// [outbox.Permanent]; no connection, a connection lost before the
// confirmation, or an exchange that does not exist or is refused is
// [outbox.Unavailable]; a negative acknowledgement (nack) is a plain error;
// an unconfirmed message when ctx ends gets a plain error wrapping ctx.Err().
func (p *Publisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	if len(msgs) == 0 {
		return []error{}
	}
	if err := ctx.Err(); err != nil {
		return outbox.ErrorsFor(len(msgs), fmt.Errorf("amqppub: publish: %w", err))
	}
	w := newWaiter(len(msgs))
	send := make([]int, 0, len(msgs))
	for i, m := range msgs {
		if err := p.check(m); err != nil {
			w.set(i, err)
			continue
		}
		send = append(send, i)
	}
	if len(send) == 0 {
		return w.results(nil)
	}

	pc, err := p.acquire(ctx)
	if err != nil {
		for _, i := range send {
			w.set(i, err)
		}
		return w.results(nil)
	}
	p.wg.Go(func() { p.sendBatch(ctx, pc, msgs, send, w) })
	select {
	case <-w.done:
		return w.results(nil)
	case <-ctx.Done():
		return w.results(func() error {
			return fmt.Errorf("amqppub: not confirmed before the publish ended: %w", ctx.Err())
		})
	}
}

// check finds what is wrong with m before it is sent.
func (p *Publisher) check(m *outbox.Message) error {
	switch {
	case m == nil:
		return outbox.Permanent(errors.New("amqppub: nil message"))
	case len(m.Payload) > p.cfg.maxPayload:
		return outbox.Permanent(fmt.Errorf("amqppub: message of %d bytes is over the limit of %d", len(m.Payload), p.cfg.maxPayload))
	case len(p.RoutingKey(m)) > maxShortString:
		return outbox.Permanent(fmt.Errorf("amqppub: routing key of %d bytes is over AMQP's limit of %d", len(p.RoutingKey(m)), maxShortString))
	}
	return nil
}

// publishing builds the AMQP message for m.
func publishing(m *outbox.Message) amqp.Publishing {
	table := make(amqp.Table, len(m.Headers)+5)
	for k, v := range m.StandardHeadersSeq() {
		table[k] = v
	}
	pub := amqp.Publishing{
		Headers:      table,
		ContentType:  m.MediaType(),
		DeliveryMode: amqp.Persistent,
		MessageId:    m.MessageID,
		Type:         m.EventType,
		Body:         m.Payload,
	}
	if !m.CreatedAt.IsZero() {
		pub.Timestamp = m.CreatedAt
	}
	return pub
}

// sendBatch publishes msgs[send...] on pc and records each one's outcome in
// w. It runs in its own goroutine so that Publish can return when ctx ends
// even if a write blocks; it then closes pc instead of reusing it.
func (p *Publisher) sendBatch(ctx context.Context, pc *pubChannel, msgs []*outbox.Message, send []int, w *waiter) {
	healthy := false
	defer func() { p.release(pc, healthy) }()

	// Drop stale returns (there should be none on a channel that was reused).
	for len(pc.returns) > 0 {
		<-pc.returns
	}
	confirms, ret, sendErr := p.publishAll(ctx, pc, msgs, send, w)
	if !awaitConfirms(ctx, pc, send, confirms, ret) {
		return // Publish reports the unconfirmed; the channel is dropped
	}
	healthy = sendErr == nil
	for _, i := range send {
		dc := confirms[i]
		if dc == nil {
			continue
		}
		switch r, isReturned := ret.returned[i]; {
		case isReturned:
			w.set(i, p.unroutable(r))
		case dc.Acked():
			w.set(i, nil)
		case pc.ch.IsClosed():
			healthy = false
			w.set(i, p.channelError(pc, "await confirm", amqp.ErrClosed))
		default:
			w.set(i, fmt.Errorf("amqppub: nacked by the broker (delivery tag %d)", dc.DeliveryTag))
		}
	}
}

// publishAll publishes msgs[send...] on pc until a publish fails; the
// messages it could not send get their error in w. It returns each sent
// message's pending confirmation (by index in msgs) and the first error.
func (p *Publisher) publishAll(ctx context.Context, pc *pubChannel, msgs []*outbox.Message, send []int,
	w *waiter) ([]*amqp.DeferredConfirmation, *returns, error) {
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	ret := &returns{byID: make(map[string][]int, len(send)), returned: make(map[int]amqp.Return)}
	var sendErr error
	for _, i := range send {
		m := msgs[i]
		if sendErr == nil {
			confirms[i], sendErr = pc.ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.exchange, p.RoutingKey(m),
				p.cfg.mandatory, false, publishing(m))
		}
		if sendErr != nil {
			w.set(i, p.channelError(pc, "publish", sendErr))
			continue
		}
		ret.byID[m.MessageID] = append(ret.byID[m.MessageID], i)
	}
	return confirms, ret, sendErr
}

// returns matches the messages the broker returned (basic.return, by
// message id) to the batch's indexes.
type returns struct {
	byID     map[string][]int
	returned map[int]amqp.Return
}

// add records r for the first message of its id not returned yet.
func (rt *returns) add(r amqp.Return) {
	for _, i := range rt.byID[r.MessageId] {
		if _, ok := rt.returned[i]; !ok {
			rt.returned[i] = r
			return
		}
	}
}

// awaitConfirms waits for every confirmation, reading the returns
// meanwhile, then drains the returns left; false when ctx ended first.
// Confirms are matched to messages by delivery tag (amqp091's
// DeferredConfirmation), whatever order and grouping (multiple) the broker
// acknowledges them in. A basic.return precedes its message's basic.ack,
// so reading returns while waiting sees each one in time.
func awaitConfirms(ctx context.Context, pc *pubChannel, send []int, confirms []*amqp.DeferredConfirmation, ret *returns) bool {
	for _, i := range send {
		dc := confirms[i]
		if dc == nil {
			continue
		}
	wait:
		for {
			select {
			case <-dc.Done():
				break wait
			case r, ok := <-pc.returns:
				if ok {
					ret.add(r)
				}
			case <-ctx.Done():
				return false
			}
		}
	}
	for {
		select {
		case r, ok := <-pc.returns:
			if !ok {
				return true
			}
			ret.add(r)
		default:
			return true
		}
	}
}

// unroutable is the error of a message the broker returned: marked
// [outbox.Unroutable], and [outbox.Permanent] with WithUnroutablePermanent.
func (p *Publisher) unroutable(r amqp.Return) error {
	err := outbox.Unroutable(fmt.Errorf("amqppub: unroutable: %d %s: no queue bound to exchange %q with routing key %q",
		r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey))
	if p.cfg.unroutableDead {
		return outbox.Permanent(fmt.Errorf("%w (dead at once: WithUnroutablePermanent)", err))
	}
	return err
}

// channelError classifies a failure of pc: the connection is gone, or the
// broker closed the channel with a reason.
func (p *Publisher) channelError(pc *pubChannel, doing string, err error) error {
	reason := pc.closeReason()
	if reason != nil {
		err = reason
	}
	wrapped := fmt.Errorf("amqppub: %s: %w", doing, err)
	var ae *amqp.Error
	switch {
	case connectionGone(pc.conn, err):
		return outbox.Unavailable(wrapped)
	case errors.As(err, &ae) && (ae.Code == amqp.NotFound || ae.Code == amqp.AccessRefused):
		// No such exchange, or no permission to it: every message fails the
		// same way until an operator fixes the broker.
		return outbox.Unavailable(wrapped)
	}
	return wrapped
}

// connectionGone reports whether err means that conn's socket failed: the
// connection is gone even if its reader has not noticed yet.
func connectionGone(conn *amqp.Connection, err error) bool {
	var netErr net.Error
	return conn.IsClosed() || errors.As(err, &netErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Ping returns nil when the Publisher is connected and the broker answers
// (a channel opens). While disconnected it asks for a connection attempt at
// once and waits for it within ctx. Pings made while one is waiting for the
// broker share its answer, so a broker that hangs holds one goroutine of
// the Publisher, not one per call.
func (p *Publisher) Ping(ctx context.Context) error {
	conn, _, err := p.connection(ctx)
	if err != nil {
		return fmt.Errorf("amqppub: ping: %w", err)
	}
	err = p.ping.Do(ctx, p.wg.Go, func() error {
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Close()
		}
		return err
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return fmt.Errorf("amqppub: ping: no answer: %w", err)
	}
	return fmt.Errorf("amqppub: ping: %w", err)
}

// waiter collects one result per message; the batch goroutine may run after
// Publish returned, so results are copied out under the lock.
type waiter struct {
	mu      sync.Mutex
	errs    []error
	got     []bool
	pending int
	done    chan struct{}
}

func newWaiter(n int) *waiter {
	return &waiter{errs: make([]error, n), got: make([]bool, n), pending: n, done: make(chan struct{})}
}

func (w *waiter) set(i int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.got[i] {
		return
	}
	w.errs[i], w.got[i] = err, true
	if w.pending--; w.pending == 0 {
		close(w.done)
	}
}

// results copies the results out; unset ones get missing() when given.
func (w *waiter) results(missing func() error) []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.errs)
	if missing != nil && w.pending > 0 {
		err := missing()
		for i, ok := range w.got {
			if !ok {
				out[i] = err
			}
		}
	}
	return out
}
