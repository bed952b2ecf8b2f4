package redispub

import (
	"context"
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

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
)

// The fields of a stream entry. Consumers read the message back from these.
const (
	FieldMessageID     = "message_id"     // the outbox message id
	FieldKey           = "key"            // the partition key (aggregate id unless set)
	FieldAggregateType = "aggregate_type" // the aggregate type
	FieldAggregateID   = "aggregate_id"   // the aggregate id
	FieldEventType     = "event_type"     // the event type
	FieldHeaders       = "headers"        // a JSON object of string values: outbox.Message.StandardHeaders
	FieldPayload       = "payload"        // the payload, byte for byte (any bytes)
	FieldContentType   = "content_type"   // the payload's media type: outbox.Message.MediaType
	FieldCreatedAt     = "created_at"     // RFC 3339 with nanoseconds, when the message has a CreatedAt
)

// DefaultMaxPayloadSize is the largest payload Publish sends by default: 512
// MiB, Redis's default proto-max-bulk-len.
const DefaultMaxPayloadSize = 512 << 20

// dedupInfix sits between a stream's hash tag and a message id in a dedup key.
const dedupInfix = ":outbox-dedup:"

// Publisher appends outbox messages to Redis streams with XADD, through a
// go-redis client the caller built and closes. It is safe for concurrent
// use. Call Close after the last Publish: it waits for any pipeline that
// outlived its Publish's context.
type Publisher struct {
	client redis.UniversalClient
	cfg    config
	wg     sync.WaitGroup // pipelines that outlived their Publish

	mu     sync.Mutex
	closed bool
}

var (
	_ outbox.Publisher = (*Publisher)(nil)
	_ outbox.Pinger    = (*Publisher)(nil)
)

type config struct {
	streamPrefix string
	maxLen       int64
	dedupTTL     time.Duration
	maxPayload   int
	script       *redis.Script // dedupScript; tests use variants
}

func defaultConfig() config { return config{maxPayload: DefaultMaxPayloadSize, script: dedupScript} }

func (c *config) validate() error {
	var errs []error
	if c.maxLen < 0 {
		errs = append(errs, fmt.Errorf("WithMaxLen: %d is negative", c.maxLen))
	}
	if c.dedupTTL < 0 || (c.dedupTTL > 0 && c.dedupTTL < time.Millisecond) {
		errs = append(errs, fmt.Errorf("WithDedup: TTL %v is neither 0 nor at least 1ms", c.dedupTTL))
	}
	if c.maxPayload <= 0 {
		errs = append(errs, fmt.Errorf("WithMaxPayloadSize: %d is not positive", c.maxPayload))
	}
	return errors.Join(errs...)
}

// Option configures a [Publisher].
type Option func(*config)

// WithStreamPrefix puts prefix in front of every message's destination
// ([outbox.Message.Destination]: its Topic, else its EventType) to make the
// stream key, e.g. "outbox:" + "ORDER_PAID". Default: "" (the destination
// as is).
func WithStreamPrefix(prefix string) Option { return func(c *config) { c.streamPrefix = prefix } }

// WithMaxLen trims each stream as it is appended to, to about n entries
// (XADD MAXLEN ~ n: Redis trims whole nodes, so a stream may hold somewhat
// more). Trimmed entries are gone for consumers that had not read them yet.
// Default: 0, no trimming.
func WithMaxLen(n int64) Option { return func(c *config) { c.maxLen = n } }

// WithDedup makes a re-send of a message id a no-op for ttl: a Lua script
// checks a key for the id, and only when it is absent runs XADD and sets the
// key (holding the entry's id) with that TTL, atomically. A duplicate is
// confirmed (nil result) without a second entry. The key is
// "{<stream>}:outbox-dedup:<message id>", in the stream's hash slot (on a
// cluster too); a stream key that has a hash tag of its own keeps it. Pick
// a TTL longer than the relay's lease plus its longest backoff, as for a
// NATS duplicate window. Default: 0, off.
func WithDedup(ttl time.Duration) Option { return func(c *config) { c.dedupTTL = ttl } }

// WithMaxPayloadSize sets the largest payload Publish sends; a larger one
// fails alone with [outbox.Permanent] before it reaches Redis. Default:
// DefaultMaxPayloadSize (512 MiB, Redis's proto-max-bulk-len).
func WithMaxPayloadSize(n int) Option { return func(c *config) { c.maxPayload = n } }

// New returns a Publisher that appends through client, which the caller
// built (see [NewClient]) and closes. For Publish to end when its context
// does, the client should have ContextTimeoutEnabled (NewClient sets it);
// otherwise Publish still returns at the deadline and leaves the pipeline to
// the client's own timeouts. Leave the client's MaxRetries at -1 (as
// NewClient does) unless dedup is on: a command retried after a lost reply
// appends a second entry. New panics if client is nil, a programmer error.
func New(client redis.UniversalClient, opts ...Option) (*Publisher, error) {
	if client == nil {
		panic("redispub: New with a nil client")
	}
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("redispub: new publisher: %w", err)
	}
	return &Publisher{client: client, cfg: cfg}, nil
}

// NewClient returns a go-redis client for a redis:// or rediss:// URL (see
// redis.ParseURL: user, password, database number, TLS, pool settings as
// query parameters), with ContextTimeoutEnabled on and MaxRetries -1 (the
// relay retries, not the client). The caller closes it. Errors never
// contain the password.
func NewClient(rawURL string) (*redis.Client, error) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("redispub: parse URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	return redis.NewClient(opt), nil
}

// Close waits for the pipelines that outlived their Publish (after a
// deadline) to end; it does not close the client. Publish fails after Close.
// It is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// Stream returns the stream key m is appended to.
func (p *Publisher) Stream(m *outbox.Message) string { return p.cfg.streamPrefix + m.Destination() }

// DedupKey returns the key that marks m's id as published to its stream
// when dedup is on ([WithDedup]).
func (p *Publisher) DedupKey(m *outbox.Message) string { return dedupKey(p.Stream(m), m.MessageID) }

func dedupKey(stream, id string) string {
	if tag := hashTag(stream); tag != "" {
		return stream + dedupInfix + id
	}
	return "{" + stream + "}" + dedupInfix + id
}

// hashTag returns the Redis Cluster hash tag of key, or "" when it has none.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}

// Publish appends every message to its stream in one pipeline (one round
// trip per connection) and returns one error per message, in order: nil
// when Redis appended the entry (or, with dedup, had appended it before).
//
// An entry's fields are described by the Field* constants; its id is
// generated by Redis ("*"). Durability is Redis's: an appended entry
// survives a restart only as far as the server's AOF/RDB settings allow.
//
// Errors: a payload over [WithMaxPayloadSize] is [outbox.Permanent]; a
// connection that fails (refused, reset, closed client, pool exhausted) or
// a server that cannot take writes (a key of another type at the stream's
// name, out of memory, read-only replica, loading, authentication) is
// [outbox.Unavailable]; an entry not confirmed when ctx ends gets a plain
// error wrapping ctx.Err() (it may still be appended later: a duplicate the
// message id, or dedup, takes care of).
func (p *Publisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	if len(msgs) == 0 {
		return []error{}
	}
	if err := ctx.Err(); err != nil {
		return outbox.ErrorsFor(len(msgs), fmt.Errorf("redispub: publish: %w", err))
	}
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.wg.Add(1)
	}
	p.mu.Unlock()
	if closed {
		return outbox.ErrorsFor(len(msgs), outbox.Unavailable(errors.New("redispub: publisher closed")))
	}

	errs := make([]error, len(msgs))
	done := make(chan struct{})
	go func() {
		defer p.wg.Done()
		defer close(done)
		p.publish(ctx, msgs, errs)
	}()
	select {
	case <-done:
		return errs
	case <-ctx.Done():
		select {
		case <-done: // finished at the same moment: the results are real
			return errs
		default:
		}
		return outbox.ErrorsFor(len(msgs), fmt.Errorf("redispub: not confirmed before the publish ended: %w", ctx.Err()))
	}
}

// publish runs the pipeline and fills errs; errs is Publish's only while
// this runs, so it is written here alone.
func (p *Publisher) publish(ctx context.Context, msgs []*outbox.Message, errs []error) {
	send := make([]int, 0, len(msgs))
	for i, m := range msgs {
		switch {
		case m == nil:
			errs[i] = outbox.Permanent(errors.New("redispub: nil message"))
		case len(m.Payload) > p.cfg.maxPayload:
			errs[i] = outbox.Permanent(fmt.Errorf("redispub: payload of %d bytes is over the limit of %d",
				len(m.Payload), p.cfg.maxPayload))
		default:
			send = append(send, i)
		}
	}
	// With dedup a pass can meet NOSCRIPT (the server lost its script cache,
	// e.g. after a restart); such a command did not run, so it runs again
	// once the script is loaded.
	for pass := 0; len(send) > 0 && pass < 2; pass++ {
		cmds := make([]redis.Cmder, len(send))
		_, err := p.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for j, i := range send {
				cmds[j] = p.append(ctx, pipe, msgs[i])
			}
			return nil
		})
		if err != nil && cmds[0] == nil {
			for _, i := range send {
				errs[i] = classify(err)
			}
			return
		}
		var again []int
		for j, i := range send {
			err := cmds[j].Err()
			if p.cfg.dedupTTL > 0 && redis.HasErrorPrefix(err, "NOSCRIPT") && pass == 0 {
				again = append(again, i)
				continue
			}
			errs[i] = classify(err)
		}
		if len(again) > 0 {
			if err := p.cfg.script.Load(ctx, p.client).Err(); err != nil {
				for _, i := range again {
					errs[i] = classify(err)
				}
				return
			}
		}
		send = again
	}
}

// append queues the command that appends m.
func (p *Publisher) append(ctx context.Context, pipe redis.Pipeliner, m *outbox.Message) redis.Cmder {
	stream := p.Stream(m)
	values := fields(m)
	if p.cfg.dedupTTL <= 0 {
		args := &redis.XAddArgs{Stream: stream, Values: values, ID: "*"}
		if p.cfg.maxLen > 0 {
			args.MaxLen, args.Approx = p.cfg.maxLen, true
		}
		return pipe.XAdd(ctx, args)
	}
	args := make([]any, 0, 2+len(values))
	args = append(args, p.cfg.dedupTTL.Milliseconds(), p.cfg.maxLen)
	args = append(args, values...)
	return p.cfg.script.EvalSha(ctx, pipe, []string{dedupKey(stream, m.MessageID), stream}, args...)
}

// dedupScript appends an entry unless the dedup key exists, then sets the
// key (to the entry's id) with the TTL. It reads before it writes, so a
// failed XADD leaves no key behind. KEYS: dedup key, stream. ARGV: TTL in
// ms, MAXLEN (0 = none), then field/value pairs. Returns the entry's id, new
// or earlier.
var dedupScript = redis.NewScript(dedupSource)

const dedupSource = `
local seen = redis.call('GET', KEYS[1])
if seen then
  return seen
end
local args = {'XADD', KEYS[2]}
local maxlen = tonumber(ARGV[2])
if maxlen > 0 then
  table.insert(args, 'MAXLEN')
  table.insert(args, '~')
  table.insert(args, maxlen)
end
table.insert(args, '*')
for i = 3, #ARGV do
  table.insert(args, ARGV[i])
end
local id = redis.call(unpack(args))
redis.call('SET', KEYS[1], id, 'PX', ARGV[1])
return id
`

// fields returns m's entry as field/value pairs.
func fields(m *outbox.Message) []any {
	headers, _ := json.Marshal(m.StandardHeaders()) // a map of strings always marshals
	values := []any{
		FieldMessageID, m.MessageID,
		FieldKey, m.Key(),
		FieldAggregateType, m.AggregateType,
		FieldAggregateID, m.AggregateID,
		FieldEventType, m.EventType,
		FieldHeaders, headers,
		FieldPayload, []byte(m.Payload),
		FieldContentType, m.MediaType(),
	}
	if !m.CreatedAt.IsZero() {
		values = append(values, FieldCreatedAt, m.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	return values
}

// Ping returns nil when Redis answers PING within ctx.
func (p *Publisher) Ping(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- p.client.Ping(ctx).Err() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("redispub: ping: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("redispub: ping: no answer: %w", ctx.Err())
	}
}

// unavailablePrefixes are error replies of a server that cannot take writes
// now, whatever the message.
var unavailablePrefixes = []string{
	"WRONGTYPE", "OOM", "READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN",
	"NOAUTH", "WRONGPASS", "NOPERM", "MISCONF", "BUSY",
}

// classify marks a command's error with the class the relay acts on.
func classify(err error) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("redispub: xadd: %w", err)
	var netErr net.Error
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return wrapped
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.As(err, &netErr):
		return outbox.Unavailable(wrapped)
	}
	for _, prefix := range unavailablePrefixes {
		if redis.HasErrorPrefix(err, prefix) {
			return outbox.Unavailable(wrapped)
		}
	}
	return wrapped
}
