package inbox

import (
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of the inbox's options. The docs and the tests use these same values.
const (
	// DefaultTable is the inbox table's name. The sequence guard's table is
	// named after it with a _seq suffix.
	DefaultTable = "inbox_message"
	// DefaultConsumer names the consumer when WithConsumer is not used.
	DefaultConsumer = "default"
	// DefaultRetention is how long a processed message's row is kept: a copy
	// delivered later than this is processed again.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultPurgeBatchSize is how many rows one purge statement deletes.
	DefaultPurgeBatchSize = 1000
	// DefaultFilterTimeout bounds each call to the pre-filter.
	DefaultFilterTimeout = 100 * time.Millisecond
	// DefaultFilterCooldown is how long the inbox bypasses a pre-filter
	// after it failed or timed out.
	DefaultFilterCooldown = time.Second
)

// Limits of the inbox table's columns.
const (
	// MaxConsumerLength is the longest consumer name, in bytes.
	MaxConsumerLength = 64
	// MaxMessageIDLength is the longest message id, in bytes.
	MaxMessageIDLength = 255
)

type config struct {
	table          string
	consumer       string
	retention      time.Duration
	purgeBatch     int
	filter         Filter
	filterTimeout  time.Duration
	filterCooldown time.Duration
	txOptions      *sql.TxOptions
	logger         *slog.Logger
	hooks          []Hook
	now            func() time.Time
}

func defaultConfig() config {
	return config{
		table:          DefaultTable,
		consumer:       DefaultConsumer,
		retention:      DefaultRetention,
		purgeBatch:     DefaultPurgeBatchSize,
		filterTimeout:  DefaultFilterTimeout,
		filterCooldown: DefaultFilterCooldown,
		logger:         slog.New(slog.DiscardHandler),
		now:            time.Now,
	}
}

func (c *config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	if _, err := parseIdent(c.table, true); err != nil {
		errs = append(errs, fmt.Errorf("WithTable: %w", err))
	}
	check(c.consumer != "" && len(c.consumer) <= MaxConsumerLength,
		"WithConsumer: %q is empty or longer than %d bytes", c.consumer, MaxConsumerLength)
	check(c.retention > 0, "WithRetention: %v is not positive", c.retention)
	check(c.purgeBatch >= 1, "WithPurgeBatchSize: %d is less than 1", c.purgeBatch)
	check(c.filterTimeout > 0, "WithFilterTimeout: %v is not positive", c.filterTimeout)
	check(c.filterCooldown >= 0, "WithFilterCooldown: %v is negative", c.filterCooldown)
	check(c.logger != nil, "WithLogger: logger is nil")
	return errors.Join(errs...)
}

// Option configures an [Inbox].
type Option func(*config)

// WithTable sets the inbox table's name, optionally schema-qualified
// ("app.inbox"). It must be a plain identifier: letters, digits and
// underscores. The sequence guard's table gets the same name with a _seq
// suffix. Default: DefaultTable ("inbox_message").
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithConsumer names the consumer whose processed messages the inbox records.
// Two consumers that must each handle every message (say "shipping" and
// "billing") need different names, or the second would skip what the first
// processed. Instances of one consumer share a name. At most
// MaxConsumerLength bytes. Default: DefaultConsumer ("default").
func WithConsumer(name string) Option { return func(c *config) { c.consumer = name } }

// WithRetention sets how long processed messages are remembered; [Inbox.Purge]
// deletes rows older than this. It must outlast any redelivery: the outbox's
// retries and a broker's redelivery window. Default: DefaultRetention (7 days).
func WithRetention(d time.Duration) Option { return func(c *config) { c.retention = d } }

// WithPurgeBatchSize sets how many rows one statement of [Inbox.Purge]
// deletes, so that retention never holds long locks. Default:
// DefaultPurgeBatchSize (1000).
func WithPurgeBatchSize(n int) Option { return func(c *config) { c.purgeBatch = n } }

// WithFilter puts a fast pre-filter (such as redisfilter.Filter, on Redis) in front of the
// inbox table. The table stays the source of truth: the filter only lets a
// duplicate skip the database when it is sure the message was committed, and
// a filter that fails, times out or forgot its keys only costs speed.
// Default: none.
func WithFilter(f Filter) Option { return func(c *config) { c.filter = f } }

// WithFilterTimeout bounds each call to the pre-filter; a call that takes
// longer counts as a failure. Default: DefaultFilterTimeout (100 ms).
func WithFilterTimeout(d time.Duration) Option { return func(c *config) { c.filterTimeout = d } }

// WithFilterCooldown sets how long the inbox bypasses the pre-filter after a
// failure or a timeout, so that a dead or slow filter costs at most one
// timeout per cooldown; 0 never bypasses. Default: DefaultFilterCooldown (1 s).
func WithFilterCooldown(d time.Duration) Option { return func(c *config) { c.filterCooldown = d } }

// WithTxOptions sets the options of the transaction Process opens (isolation
// level). Serialization failures of the inbox's own insert are retried.
// Default: nil (the database's default isolation).
func WithTxOptions(o *sql.TxOptions) Option { return func(c *config) { c.txOptions = o } }

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithHooks adds observers called after every Process (see [Hook]). They run
// synchronously, so they must be fast. Default: none.
func WithHooks(hooks ...Hook) Option {
	return func(c *config) { c.hooks = append(c.hooks, hooks...) }
}

// withClock replaces the clock (tests of retention).
func withClock(now func() time.Time) Option { return func(c *config) { c.now = now } }
