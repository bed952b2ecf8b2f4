package redisin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/internal/consume"
	"github.com/outboxkit/outbox/publisher/redispub"
)

// DefaultClaimIdle is how long an entry stays pending with a consumer that
// does not acknowledge it before another consumer claims it.
const DefaultClaimIdle = 30 * time.Second

// block is how long one XREADGROUP waits for new entries.
const block = time.Second

type config struct {
	consume.Config
	name       string
	claimIdle  time.Duration
	deadStream string
}

// Option configures a [Consumer].
type Option func(*config)

// WithConcurrency sets how many entries are processed at once.
// Default: inbox.DefaultConcurrency (1).
func WithConcurrency(n int) Option { return func(c *config) { c.Concurrency = n } }

// WithOrderedKeys, when on, processes the entries of one key (the entry's
// key field: the aggregate id) one at a time, in the order this consumer
// read them, while entries of different keys run concurrently. A failing
// entry then holds back its key's later entries until it succeeds or is
// dead-lettered (and, once a few of them wait, the reading of new entries). Order holds within one Consumer; a consumer group spreads
// a stream's entries over its consumers without regard to keys. Default: off.
func WithOrderedKeys(on bool) Option { return func(c *config) { c.Ordered = on } }

// WithMaxAttempts sets how many times the handler runs on an entry,
// counting earlier deliveries (the group's delivery counter, which grows
// when a crashed consumer's entry is claimed), before it is dead-lettered.
// Default: inbox.DefaultMaxAttempts (5).
func WithMaxAttempts(n int) Option { return func(c *config) { c.MaxAttempts = n } }

// WithRetryBackoff sets the delay between two runs of a failing handler:
// base × 2^(attempt-1), at most cap, ±20% jitter. Default:
// inbox.DefaultRetryBase (100 ms) and inbox.DefaultRetryCap (10 s).
func WithRetryBackoff(base, cap time.Duration) Option {
	return func(c *config) { c.RetryBase, c.RetryCap = base, cap }
}

// WithConsumerName names this consumer in the group. A consumer that
// restarts under its old name first re-reads the entries it had not
// acknowledged. Default: the host name, the process id and a random suffix.
func WithConsumerName(name string) Option { return func(c *config) { c.name = name } }

// WithClaimIdle sets how long an entry may stay unacknowledged with a
// consumer (one that died, or one that stopped mid-handler) before this
// consumer claims it (XAUTOCLAIM). It must outlast the slowest handler; a
// claim of an entry still being processed costs a duplicate run that the
// inbox absorbs. Default: DefaultClaimIdle (30 s).
func WithClaimIdle(d time.Duration) Option { return func(c *config) { c.claimIdle = d } }

// WithDeadLetterStream adds an entry whose handler failed WithMaxAttempts
// times (or returned an outbox.Permanent error) to stream, with its fields
// and with the inbox.HeaderDead* headers added to its headers field (so it
// can be replayed as it is); then it acknowledges the original. Default:
// none: the entry is retried at the capped backoff until it succeeds, never
// dropped.
func WithDeadLetterStream(stream string) Option { return func(c *config) { c.deadStream = stream } }

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.Logger = l } }

// WithHooks adds observers of every finished delivery. Default: none.
func WithHooks(hooks ...inbox.HookDelivery) Option {
	return func(c *config) { c.Hooks = append(c.Hooks, hooks...) }
}

// Consumer runs a handler through an inbox for the entries of a Redis
// stream, read in a consumer group, and acknowledges (XACK) each entry only
// after the inbox transaction committed or found it a duplicate. Safe for
// concurrent use; Run may be called once at a time.
type Consumer struct {
	rdb    redis.UniversalClient
	stream string
	group  string
	cfg    config
	engine *consume.Engine

	mu       sync.Mutex
	inFlight map[string]bool // entry ids handed to a worker and not finished
}

// New returns a consumer of stream in group (created at the start of the
// stream when missing) that processes each entry with h through in. It never
// closes rdb. It returns an error naming every invalid option. It panics if
// rdb, in or h is nil, a programmer error.
func New(rdb redis.UniversalClient, stream, group string, in *inbox.Inbox, h inbox.Handler, opts ...Option) (*Consumer, error) {
	if rdb == nil || in == nil || h == nil {
		panic("redisin: New with a nil client, inbox or handler")
	}
	cfg := config{Config: consume.DefaultConfig(), claimIdle: DefaultClaimIdle}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.name == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	errs := []error{cfg.Validate()}
	if stream == "" || group == "" {
		errs = append(errs, errors.New("stream or group name is empty"))
	}
	if cfg.claimIdle <= 0 {
		errs = append(errs, fmt.Errorf("WithClaimIdle: %v is not positive", cfg.claimIdle))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("redisin: new: %w", err)
	}
	return &Consumer{rdb: rdb, stream: stream, group: group, cfg: cfg,
		engine: consume.New(cfg.Config, in, h, "redisin"), inFlight: map[string]bool{}}, nil
}

// Name returns the consumer's name in the group.
func (c *Consumer) Name() string { return c.cfg.name }

// Run creates the group if needed, re-reads the entries this consumer name
// left unacknowledged, then reads new entries and claims the ones other
// consumers left idle for WithClaimIdle, until ctx is cancelled. Then it
// waits for the entries in flight (their transactions are cancelled and they
// stay pending, to be claimed again, unless already committed, in which
// case they are acknowledged) and returns nil. Redis errors are logged and
// retried; Run does not return because of them.
func (c *Consumer) Run(ctx context.Context) error {
	log := c.engine.Log().With("stream", c.stream, "group", c.group, "name", c.cfg.name)
	pool := c.engine.Start(ctx)
	log.Info("consumer started")
	defer func() {
		pool.Close()
		log.Info("consumer stopped")
	}()

	wait := 100 * time.Millisecond
	var lastClaim time.Time
	needGroup := true
	ownPending := "0" // re-read this name's pending entries first, then only new ones
	for ctx.Err() == nil {
		var err error
		if needGroup {
			err = c.ensureGroup(ctx)
			needGroup = err != nil
		}
		if err == nil && time.Since(lastClaim) >= c.cfg.claimIdle/2 {
			err = c.claim(ctx, pool)
			lastClaim = time.Now()
		}
		if err == nil {
			ownPending, err = c.read(ctx, pool, ownPending)
		}
		if err == nil || ctx.Err() != nil {
			wait = 100 * time.Millisecond
			continue
		}
		needGroup = true // the stream or group may have been deleted
		log.LogAttrs(ctx, slog.LevelWarn, "redis read failed, will retry", slog.String(consume.AttrError, err.Error()),
			slog.Duration(consume.AttrDelay, wait))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		wait = min(2*wait, 10*time.Second)
	}
	return nil
}

// ensureGroup creates the consumer group at the start of the stream unless it exists.
func (c *Consumer) ensureGroup(ctx context.Context) error {
	err := c.rdb.XGroupCreateMkStream(ctx, c.stream, c.group, "0").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") { // the group exists
		return fmt.Errorf("create group: %w", err)
	}
	return nil
}

// read reads once: from cursor through this name's pending entries while
// cursor is not ">", else new entries. It returns the next cursor.
func (c *Consumer) read(ctx context.Context, pool *consume.Pool, cursor string) (string, error) {
	args := &redis.XReadGroupArgs{Group: c.group, Consumer: c.cfg.name, Streams: []string{c.stream, cursor},
		Count: int64(2 * c.cfg.Concurrency)}
	if cursor == ">" {
		args.Block = block
	}
	res, err := c.rdb.XReadGroup(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return cursor, nil
	}
	if err != nil {
		return cursor, fmt.Errorf("read group: %w", err)
	}
	var msgs []redis.XMessage
	for _, s := range res {
		msgs = append(msgs, s.Messages...)
	}
	if cursor != ">" {
		if len(msgs) == 0 {
			return ">", nil // this name's backlog is done
		}
		cursor = msgs[len(msgs)-1].ID
	}
	return cursor, c.submit(ctx, pool, msgs, cursor != ">")
}

// claim takes over entries idle for longer than the claim idle time.
func (c *Consumer) claim(ctx context.Context, pool *consume.Pool) error {
	start := "0-0"
	for {
		msgs, next, err := c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: c.stream, Group: c.group,
			Consumer: c.cfg.name, MinIdle: c.cfg.claimIdle, Start: start, Count: int64(2 * c.cfg.Concurrency)}).Result()
		if err != nil {
			return fmt.Errorf("claim idle entries: %w", err)
		}
		if err := c.submit(ctx, pool, msgs, true); err != nil {
			return err
		}
		if next == "0-0" || len(msgs) == 0 {
			return nil
		}
		start = next
	}
}

// submit hands entries to the workers. redelivered entries ask Redis how
// often they were delivered. Entries whose fields are gone (trimmed) are
// acknowledged and skipped; entries already in flight here are skipped.
func (c *Consumer) submit(ctx context.Context, pool *consume.Pool, msgs []redis.XMessage, redelivered bool) error {
	for _, m := range msgs {
		if len(m.Values) == 0 {
			_ = c.rdb.XAck(ctx, c.stream, c.group, m.ID).Err()
			continue
		}
		c.mu.Lock()
		busy := c.inFlight[m.ID]
		c.inFlight[m.ID] = true
		c.mu.Unlock()
		if busy {
			continue
		}
		d := c.delivery(m)
		if redelivered {
			d.prior = c.deliveries(ctx, m.ID) - 1
		}
		if err := pool.Submit(ctx, d); err != nil {
			return nil // stopping; Submit abandoned d
		}
	}
	return nil
}

// deliveries returns how many times the group delivered the entry (1 when Redis does not say).
func (c *Consumer) deliveries(ctx context.Context, id string) int {
	p, err := c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: c.stream, Group: c.group,
		Start: id, End: id, Count: 1}).Result()
	if err != nil || len(p) == 0 {
		return 1
	}
	return int(p[0].RetryCount)
}

func (c *Consumer) done(id string) {
	c.mu.Lock()
	delete(c.inFlight, id)
	c.mu.Unlock()
}

// delivery decodes an entry written by publisher/redispub.
func (c *Consumer) delivery(m redis.XMessage) *delivery {
	field := func(k string) string { s, _ := m.Values[k].(string); return s }
	h := map[string]string{}
	_ = json.Unmarshal([]byte(field(redispub.FieldHeaders)), &h) // a broken headers field leaves h empty
	msg := consume.MessageFromHeaders(h, []byte(field(redispub.FieldPayload)))
	msg.ContentType = field(redispub.FieldContentType)
	for _, f := range []struct {
		dst *string
		key string
	}{
		{&msg.MessageID, redispub.FieldMessageID},
		{&msg.AggregateType, redispub.FieldAggregateType},
		{&msg.AggregateID, redispub.FieldAggregateID},
		{&msg.EventType, redispub.FieldEventType},
		{&msg.PartitionKey, redispub.FieldKey},
	} {
		if v := field(f.key); v != "" {
			*f.dst = v
		}
	}
	msg.Topic = c.stream
	if t, err := time.Parse(time.RFC3339Nano, field(redispub.FieldCreatedAt)); err == nil {
		msg.CreatedAt = t
	}
	return &delivery{c: c, m: m, msg: msg}
}

type delivery struct {
	c     *Consumer
	m     redis.XMessage
	msg   *outbox.Message
	prior int
}

func (d *delivery) Message() *outbox.Message { return d.msg }
func (d *delivery) Key() string              { return d.msg.Key() }
func (d *delivery) Prior() int               { return d.prior }

// Abandon leaves the entry pending; it is claimed again after the claim idle time.
func (d *delivery) Abandon() { d.c.done(d.m.ID) }

func (d *delivery) Ack(ctx context.Context) error {
	defer d.c.done(d.m.ID)
	return d.c.rdb.XAck(ctx, d.c.stream, d.c.group, d.m.ID).Err()
}

// Extend resets the entry's idle time, so other consumers do not claim it
// while its handler is retried.
func (d *delivery) Extend() {
	_ = d.c.rdb.XClaimJustID(context.Background(), &redis.XClaimArgs{Stream: d.c.stream, Group: d.c.group,
		Consumer: d.c.cfg.name, Messages: []string{d.m.ID}}).Err()
}

func (d *delivery) DeadLetter(ctx context.Context, dead consume.Dead) error {
	if d.c.cfg.deadStream == "" {
		return consume.ErrNoDeadLetter
	}
	headers, _ := json.Marshal(dead.Headers(d.msg.Headers)) // a map of strings always marshals
	values := make(map[string]any, len(d.m.Values)+1)
	for k, v := range d.m.Values {
		values[k] = v
	}
	values[redispub.FieldHeaders] = string(headers)
	return d.c.rdb.XAdd(ctx, &redis.XAddArgs{Stream: d.c.cfg.deadStream, Values: values}).Err()
}
