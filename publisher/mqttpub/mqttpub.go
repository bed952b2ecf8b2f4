package mqttpub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
)

// DefaultMaxMessageSize is the largest envelope Publish sends by default:
// 268,435,455 bytes, the most an MQTT packet can hold (less its headers).
const DefaultMaxMessageSize = 268_435_455 - 64<<10

// qos is the quality of service of every publish: at least once, PUBACK
// from the broker.
const qos = 1

// Publisher publishes outbox messages to an MQTT broker at QoS 1 through a
// paho client the caller built and disconnects. It is safe for concurrent
// use. Call Close after the last Publish: it waits for publishes that
// outlived their Publish's context.
type Publisher struct {
	client mqtt.Client
	cfg    config
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
}

var (
	_ outbox.Publisher = (*Publisher)(nil)
	_ outbox.Pinger    = (*Publisher)(nil)
)

type config struct {
	topicPrefix    string
	maxMessageSize int
	retained       bool
	raw            bool
}

func (c *config) validate() error {
	var errs []error
	if strings.ContainsAny(c.topicPrefix, "+#\x00") {
		errs = append(errs, fmt.Errorf("WithTopicPrefix: %q has a wildcard or NUL", c.topicPrefix))
	}
	if c.maxMessageSize <= 0 {
		errs = append(errs, fmt.Errorf("WithMaxMessageSize: %d is not positive", c.maxMessageSize))
	}
	return errors.Join(errs...)
}

// Option configures a [Publisher].
type Option func(*config)

// WithTopicPrefix puts prefix in front of every message's destination
// ([outbox.Message.Destination]: its Topic, else its EventType) to make the
// MQTT topic, e.g. "outbox/" + "ORDER_PAID". Default: "" (the destination as is).
func WithTopicPrefix(prefix string) Option { return func(c *config) { c.topicPrefix = prefix } }

// WithMaxMessageSize sets the largest envelope (the body sent) Publish
// sends; a larger one fails alone with [outbox.Permanent]. Set it to the
// broker's limit (Mosquitto's message_size_limit). Default:
// DefaultMaxMessageSize (MQTT's own limit).
func WithMaxMessageSize(n int) Option { return func(c *config) { c.maxMessageSize = n } }

// WithRetained sets the retain flag, so the broker keeps the last message of
// each topic for new subscribers. Default: false.
func WithRetained(on bool) Option { return func(c *config) { c.retained = on } }

// WithRawPayload publishes each message's payload itself, byte for byte, as
// the MQTT message, for consumers that are not ours (a CloudEvents
// structured event, a Protobuf reader). MQTT 3.1.1, which the paho client
// speaks, has no headers and no content type property (MQTT 5 has both),
// so nothing but the payload and the topic arrives: no message id to
// deduplicate on, no content type, no trace context, unless the payload
// holds them. Default: false (the body is an [Envelope]).
func WithRawPayload(on bool) Option { return func(c *config) { c.raw = on } }

// New returns a Publisher that publishes through client, which the caller
// built and connected (see [Connect]) and disconnects. Give it automatic
// reconnection (SetAutoReconnect) so that it comes back after an outage.
// New panics if client is nil, a programmer error.
func New(client mqtt.Client, opts ...Option) (*Publisher, error) {
	if client == nil {
		panic("mqttpub: New with a nil client")
	}
	cfg := config{maxMessageSize: DefaultMaxMessageSize}
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("mqttpub: new publisher: %w", err)
	}
	return &Publisher{client: client, cfg: cfg}, nil
}

// Close waits for publishes that outlived their Publish; it does not
// disconnect the client. Publish fails after Close. It is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// Topic returns the MQTT topic m is published to.
func (p *Publisher) Topic(m *outbox.Message) string { return p.cfg.topicPrefix + m.Destination() }

// Publish publishes every message at QoS 1 and waits, within ctx, for each
// one's PUBACK. It returns one error per message, in order: nil when the
// broker acknowledged it (how durable that is depends on the broker's
// persistence settings).
//
// MQTT 3.1.1 has no headers, so the body is a JSON [Envelope] that carries
// the message id, event type, aggregate, key, headers, content type and the
// payload (or the payload alone, [WithRawPayload]).
//
// Errors: an invalid topic or an envelope over [WithMaxMessageSize] is
// [outbox.Permanent]; a client that is not connected, or a connection lost
// before the PUBACK, is [outbox.Unavailable]; no PUBACK before ctx ends is a
// plain error wrapping ctx.Err() (Unavailable when the connection is down
// by then).
func (p *Publisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	if len(msgs) == 0 {
		return []error{}
	}
	if err := ctx.Err(); err != nil {
		return outbox.ErrorsFor(len(msgs), fmt.Errorf("mqttpub: publish: %w", err))
	}
	if !p.client.IsConnectionOpen() {
		return outbox.ErrorsFor(len(msgs), outbox.Unavailable(errors.New("mqttpub: publish: not connected")))
	}
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.wg.Add(1)
	}
	p.mu.Unlock()
	if closed {
		return outbox.ErrorsFor(len(msgs), outbox.Unavailable(errors.New("mqttpub: publisher closed")))
	}

	// paho's Publish can block (up to the client's write timeout) while
	// the connection is stuck, so the calls run apart from the wait.
	errs := make([]error, len(msgs))
	tokens := make([]mqtt.Token, len(msgs))
	queued := make(chan struct{})
	go func() {
		defer p.wg.Done()
		defer close(queued)
		for i, m := range msgs {
			topic, body, err := p.encode(m)
			if err != nil {
				errs[i] = err
				continue
			}
			if ctx.Err() != nil {
				return
			}
			tokens[i] = p.client.Publish(topic, qos, p.cfg.retained, body)
		}
	}()
	select {
	case <-queued:
	case <-ctx.Done():
		return p.expired(ctx, len(msgs))
	}

	for i, tok := range tokens {
		if tok == nil {
			continue
		}
		select {
		case <-tok.Done():
			errs[i] = classify(tok.Error())
		case <-ctx.Done():
			out := p.expired(ctx, len(msgs))
			for j, tok := range tokens {
				switch {
				case errs[j] != nil:
					out[j] = errs[j]
				case tok != nil && isDone(tok):
					out[j] = classify(tok.Error())
				}
			}
			return out
		}
	}
	return errs
}

func isDone(tok mqtt.Token) bool {
	select {
	case <-tok.Done():
		return true
	default:
		return false
	}
}

// expired returns n timeout errors, Unavailable when the connection is down.
func (p *Publisher) expired(ctx context.Context, n int) []error {
	err := fmt.Errorf("mqttpub: no PUBACK before the publish ended: %w", ctx.Err())
	if !p.client.IsConnectionOpen() {
		err = outbox.Unavailable(fmt.Errorf("%w (not connected)", err))
	}
	return outbox.ErrorsFor(n, err)
}

// encode returns m's topic and envelope, or a permanent error.
func (p *Publisher) encode(m *outbox.Message) (string, []byte, error) {
	if m == nil {
		return "", nil, outbox.Permanent(errors.New("mqttpub: nil message"))
	}
	topic := p.Topic(m)
	switch {
	case topic == "", len(topic) > 65535, strings.ContainsAny(topic, "+#\x00"):
		return "", nil, outbox.Permanent(fmt.Errorf("mqttpub: %q is not a topic one can publish to", topic))
	case m.JSONPayload() && !json.Valid(m.Payload):
		return "", nil, outbox.Permanent(fmt.Errorf("mqttpub: payload is not valid JSON, which content type %s requires", m.MediaType()))
	}
	body := m.Payload
	if !p.cfg.raw {
		body = envelope.Encode(m)
	}
	if len(body) > p.cfg.maxMessageSize {
		return "", nil, outbox.Permanent(fmt.Errorf("mqttpub: message of %d bytes is over the limit of %d", len(body), p.cfg.maxMessageSize))
	}
	return topic, body, nil
}

// classify marks a token's error with the class the relay acts on.
func classify(err error) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("mqttpub: publish: %w", err)
	var netErr net.Error
	switch {
	case errors.Is(err, mqtt.ErrNotConnected),
		errors.As(err, &netErr), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		// paho's own words for a connection that died under an in-flight publish
		strings.Contains(err.Error(), "connection lost"):
		return outbox.Unavailable(wrapped)
	}
	return wrapped
}

// Ping returns nil when the broker answers within ctx: it sends an
// UNSUBSCRIBE for a topic nobody uses, which every broker acknowledges and
// which changes nothing.
func (p *Publisher) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mqttpub: ping: %w", err)
	}
	if !p.client.IsConnectionOpen() {
		return outbox.Unavailable(errors.New("mqttpub: ping: not connected"))
	}
	// paho's Unsubscribe itself waits, up to the write timeout (10 s), for
	// a connection that is being lost to take the packet: it runs aside,
	// as Publish's calls do, so that ctx bounds the Ping.
	queued := make(chan mqtt.Token, 1)
	go func() { queued <- p.client.Unsubscribe(pingTopic) }()
	var tok mqtt.Token
	select {
	case tok = <-queued:
	case <-ctx.Done():
		return fmt.Errorf("mqttpub: ping: no answer: %w", ctx.Err())
	}
	select {
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			return fmt.Errorf("mqttpub: ping: %w", classify(err))
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mqttpub: ping: no answer: %w", ctx.Err())
	}
}

// pingTopic is the topic Ping unsubscribes from.
const pingTopic = "outbox-ping/never-subscribed"

// Envelope is the JSON body of every MQTT message unless
// [WithRawPayload], since MQTT 3.1.1 has no headers. Consumers may decode
// into it. Its fields: id (the message id), type (the event type), topic
// (the destination, before any prefix), key (the partition key), aggregate,
// content_type (the payload's media type), payload (a JSON payload, byte for
// byte) or payload_base64 (any other payload, standard base64), headers
// ([outbox.Message.StandardHeaders]) and created_at (absent when unknown).
// Envelope.Body returns the payload's bytes from whichever field holds them.
type Envelope = envelope.Envelope

// Aggregate is the entity an [Envelope] is about.
type Aggregate = envelope.Aggregate

// ClientOptions turns an MQTT URL into paho client options:
//
//	mqtt://[user:password@]host[:1883][?client_id=ID]   (plain TCP)
//	mqtts://[user:password@]host[:8883][?client_id=ID]  (TLS, system roots)
//
// with automatic reconnection (every 100 ms to 5 s), a clean session, a
// 10 s connect and write timeout, a store of packets in flight that hands
// out copies (paho resends them after a reconnect), and a random client id
// "outbox-<hex>" unless client_id is given. Errors never contain the password.
func ClientOptions(rawURL string) (*mqtt.ClientOptions, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("mqttpub: parse URL: %w", err)
	}
	var scheme, port string
	switch u.Scheme {
	case "mqtt", "tcp":
		scheme, port = "tcp", "1883"
	case "mqtts", "ssl", "tls":
		scheme, port = "ssl", "8883"
	default:
		return nil, fmt.Errorf("mqttpub: URL scheme %q is not mqtt or mqtts", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, errors.New("mqttpub: URL has no host")
	}
	if u.Port() != "" {
		port = u.Port()
	}
	id := u.Query().Get("client_id")
	if id == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		id = "outbox-" + hex.EncodeToString(b[:])
	}
	o := mqtt.NewClientOptions().
		AddBroker(scheme + "://" + u.Hostname() + ":" + port).
		SetClientID(id).
		SetCleanSession(true).
		SetStore(newPacketStore()).
		SetAutoReconnect(true).
		SetConnectRetryInterval(100 * time.Millisecond).
		SetMaxReconnectInterval(5 * time.Second).
		SetConnectTimeout(10 * time.Second).
		SetWriteTimeout(10 * time.Second)
	if u.User != nil {
		o.SetUsername(u.User.Username())
		if pw, ok := u.User.Password(); ok {
			o.SetPassword(pw)
		}
	}
	return o, nil
}

// Connect builds a client from rawURL (see [ClientOptions]) and connects it
// within ctx. The caller disconnects it.
func Connect(ctx context.Context, rawURL string) (mqtt.Client, error) {
	o, err := ClientOptions(rawURL)
	if err != nil {
		return nil, err
	}
	c := mqtt.NewClient(o)
	tok := c.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		c.Disconnect(0)
		return nil, fmt.Errorf("mqttpub: connect: %w", ctx.Err())
	}
	if err := tok.Error(); err != nil {
		return nil, fmt.Errorf("mqttpub: connect: %w", err)
	}
	return c, nil
}
