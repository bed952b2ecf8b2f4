package kafkain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/internal/consume"
)

// DefaultMaxPollRecords is how many records one poll takes by default.
const DefaultMaxPollRecords = 100

// commitTimeout bounds an offset commit, which runs even after shutdown began.
const commitTimeout = 5 * time.Second

type config struct {
	consume.Config
	maxPoll   int
	deadTopic string
}

// Option configures a [Consumer].
type Option func(*config)

// WithConcurrency sets how many records are processed at once, across and
// within partitions. Default: inbox.DefaultConcurrency (1).
func WithConcurrency(n int) Option { return func(c *config) { c.Concurrency = n } }

// WithOrderedKeys, when on, processes the records of one key one at a time,
// in offset order, while records of different keys run concurrently. Kafka
// puts one key in one partition, and a partition belongs to one group member,
// so the order holds across any number of consumer instances. A failing
// record then holds back its key's later records until it succeeds or is
// dead-lettered. Default: off.
func WithOrderedKeys(on bool) Option { return func(c *config) { c.Ordered = on } }

// WithMaxAttempts sets how many times the handler runs on a record before
// it is dead-lettered. Kafka does not count deliveries, so a record that
// crashes the process starts again at attempt 1 after the restart.
// Default: inbox.DefaultMaxAttempts (5).
func WithMaxAttempts(n int) Option { return func(c *config) { c.MaxAttempts = n } }

// WithRetryBackoff sets the delay between two runs of a failing handler:
// base × 2^(attempt-1), at most cap, ±20% jitter. Default:
// inbox.DefaultRetryBase (100 ms) and inbox.DefaultRetryCap (10 s).
func WithRetryBackoff(base, cap time.Duration) Option {
	return func(c *config) { c.RetryBase, c.RetryCap = base, cap }
}

// WithMaxPollRecords sets how many records one poll takes. The consumer
// commits a poll's offsets once its records are done, so a larger poll
// commits less often but waits for its slowest record. Default:
// DefaultMaxPollRecords (100).
func WithMaxPollRecords(n int) Option { return func(c *config) { c.maxPoll = n } }

// WithDeadLetterTopic produces a record whose handler failed WithMaxAttempts
// times (or returned an outbox.Permanent error) to topic, with its key,
// value and headers plus the inbox.HeaderDead* headers, before committing
// past it. Default: none: the record is retried at the capped backoff until
// it succeeds, never skipped: the poll it came in, so every partition of
// this member, waits.
func WithDeadLetterTopic(topic string) Option { return func(c *config) { c.deadTopic = topic } }

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.Logger = l } }

// WithHooks adds observers of every finished delivery. Default: none.
func WithHooks(hooks ...inbox.HookDelivery) Option {
	return func(c *config) { c.Hooks = append(c.Hooks, hooks...) }
}

// Params say what to consume.
type Params struct {
	// Group is the consumer group; its members share the topics' partitions.
	Group string
	// Topics are the topics to consume.
	Topics []string
	// ClientOpts are the Kafka client's own options: kgo.SeedBrokers at
	// least, and TLS, SASL or a reset offset as needed. The consumer adds
	// ConsumerGroup, ConsumeTopics, DisableAutoCommit and
	// BlockRebalanceOnPoll. A new group starts at the start of each partition.
	ClientOpts []kgo.Opt
}

// Consumer runs a handler through an inbox for the records of a Kafka
// consumer group (franz-go) and commits a record's offset only after the
// inbox transaction committed (or found a duplicate), per partition, and
// never past a record that is not done. Rebalances wait until the records
// of the current poll are done and committed, so a partition moves to
// another member with nothing processed and uncommitted. Safe for
// concurrent use; Run may be called once at a time.
type Consumer struct {
	p      Params
	cfg    config
	engine *consume.Engine
}

// New returns a consumer that processes each record with h through in. It
// returns an error naming every invalid option or parameter. It panics if in
// or h is nil, a programmer error.
func New(in *inbox.Inbox, h inbox.Handler, p Params, opts ...Option) (*Consumer, error) {
	if in == nil || h == nil {
		panic("kafkain: New with a nil inbox or handler")
	}
	cfg := config{Config: consume.DefaultConfig(), maxPoll: DefaultMaxPollRecords}
	for _, o := range opts {
		o(&cfg)
	}
	errs := []error{cfg.Validate()}
	if cfg.maxPoll < 1 {
		errs = append(errs, fmt.Errorf("WithMaxPollRecords: %d is less than 1", cfg.maxPoll))
	}
	if p.Group == "" {
		errs = append(errs, errors.New("Params.Group is empty"))
	}
	if len(p.Topics) == 0 || slices.Contains(p.Topics, "") {
		errs = append(errs, errors.New("Params.Topics is empty or has an empty topic"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("kafkain: new: %w", err)
	}
	return &Consumer{p: p, cfg: cfg, engine: consume.New(cfg.Config, in, h, "kafkain")}, nil
}

// Run joins the group and consumes until ctx is cancelled, then waits for
// the records in flight (their transactions are cancelled unless already
// committed), commits what is done, leaves the group and returns nil. It
// returns an error only when the Kafka client cannot be created.
func (c *Consumer) Run(ctx context.Context) error {
	opts := append(slices.Clone(c.p.ClientOpts),
		kgo.ConsumerGroup(c.p.Group), kgo.ConsumeTopics(c.p.Topics...),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafkain: new client: %w", err)
	}
	pool := c.engine.Start(ctx)
	log := c.engine.Log()
	log.Info("consumer started")
	defer func() {
		pool.Close()
		cl.CloseAllowingRebalance()
		log.Info("consumer stopped")
	}()
	for ctx.Err() == nil {
		fetches := cl.PollRecords(ctx, c.cfg.maxPoll)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return nil // records polled now are not processed, so not committed
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			log.LogAttrs(ctx, slog.LevelWarn, "fetch failed", slog.String("topic", topic),
				slog.Int("partition", int(partition)), slog.String(consume.AttrError, err.Error()))
		})
		if recs := fetches.Records(); len(recs) > 0 {
			c.processBatch(ctx, cl, pool, recs)
		}
		cl.AllowRebalance()
	}
	return nil
}

// processBatch runs a poll's records through the pool, waits for them, and
// commits, per partition, the offset after the last record of the prefix
// that is done.
func (c *Consumer) processBatch(ctx context.Context, cl *kgo.Client, pool *consume.Pool, recs []*kgo.Record) {
	b := &batch{done: make([]bool, len(recs))}
	for i, r := range recs {
		b.wg.Add(1)
		if err := pool.Submit(ctx, c.delivery(cl, b, i, r)); err != nil {
			break // stopping: the rest stays uncommitted
		}
	}
	b.wg.Wait()

	last := map[topicPartition]*kgo.Record{}
	blocked := map[topicPartition]bool{}
	for i, r := range recs { // a poll returns each partition's records in offset order
		tp := topicPartition{r.Topic, r.Partition}
		if blocked[tp] {
			continue
		}
		if !b.isDone(i) {
			blocked[tp] = true
			continue
		}
		last[tp] = r
	}
	if len(last) == 0 {
		return
	}
	commit := make([]*kgo.Record, 0, len(last))
	for _, r := range last {
		commit = append(commit, r)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	if err := cl.CommitRecords(cctx, commit...); err != nil {
		c.engine.Log().LogAttrs(ctx, slog.LevelWarn, "offset commit failed, records will be delivered again",
			slog.String(consume.AttrError, err.Error()))
	}
}

type topicPartition struct {
	topic     string
	partition int32
}

// batch tracks which records of a poll are done.
type batch struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	done []bool
}

func (b *batch) finish(i int, ok bool) {
	b.mu.Lock()
	b.done[i] = ok
	b.mu.Unlock()
	b.wg.Done()
}

func (b *batch) isDone(i int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done[i]
}

func (c *Consumer) delivery(cl *kgo.Client, b *batch, i int, r *kgo.Record) *delivery {
	h := make(map[string]string, len(r.Headers))
	for _, kv := range r.Headers {
		h[kv.Key] = string(kv.Value)
	}
	msg := consume.MessageFromHeaders(h, r.Value)
	msg.ContentType = h["content-type"] // kafkapub.HeaderContentType
	msg.Topic = r.Topic
	msg.PartitionKey = string(r.Key)
	msg.CreatedAt = r.Timestamp
	return &delivery{c: c, cl: cl, b: b, i: i, r: r, msg: msg}
}

type delivery struct {
	c   *Consumer
	cl  *kgo.Client
	b   *batch
	i   int
	r   *kgo.Record
	msg *outbox.Message
}

func (d *delivery) Message() *outbox.Message { return d.msg }
func (d *delivery) Key() string              { return string(d.r.Key) }
func (d *delivery) Prior() int               { return 0 }
func (d *delivery) Extend()                  {}
func (d *delivery) Abandon()                 { d.b.finish(d.i, false) }

// Ack marks the record done; the batch commits it.
func (d *delivery) Ack(context.Context) error {
	d.b.finish(d.i, true)
	return nil
}

func (d *delivery) DeadLetter(ctx context.Context, dead consume.Dead) error {
	if d.c.cfg.deadTopic == "" {
		return consume.ErrNoDeadLetter
	}
	h := dead.Headers(d.msg.Headers)
	rec := &kgo.Record{Topic: d.c.cfg.deadTopic, Key: d.r.Key, Value: d.r.Value, Headers: make([]kgo.RecordHeader, 0, len(h))}
	for _, k := range slices.Sorted(maps.Keys(h)) {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(h[k])})
	}
	return d.cl.ProduceSync(ctx, rec).FirstErr()
}
