package outbox

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of the relay's options. The daemon, the docs and the tests use these
// same values.
const (
	// DefaultMinBatchSize and DefaultMaxBatchSize bound the batch size of a
	// relay that sizes its batches itself (the default; see
	// [WithBatchSizeRange]): small batches for a trickle, large ones while a
	// backlog drains.
	DefaultMinBatchSize   = 10
	DefaultMaxBatchSize   = 1000
	DefaultPollInterval   = time.Second
	DefaultMaxAttempts    = 5
	DefaultBackoffBase    = time.Second
	DefaultBackoffCap     = 5 * time.Minute
	DefaultPublishTimeout = 3 * time.Second
	// DefaultLease is how long a claim reserves its rows. It must outlast a
	// publish and the acknowledgement that follows it.
	DefaultLease = 30 * time.Second
	// DefaultProbeInterval is how long the relay waits before probing a
	// destination that was down as a whole.
	DefaultProbeInterval = 2 * time.Second
	// DefaultMaxProbeInterval caps the probe interval as a destination stays down.
	DefaultMaxProbeInterval = 30 * time.Second
	// DefaultMinPollInterval is how soon a relay that just found rows looks
	// again (adaptive polling); after a look that finds nothing it waits a
	// quarter of the time it has found nothing, at least this and at most
	// the poll interval.
	DefaultMinPollInterval = 2 * time.Millisecond
	// DefaultMinInFlight and DefaultMaxInFlight bound how many claimed
	// batches a relay may have at the broker at once (see
	// [WithMaxInFlightRange]). With DefaultMaxBatchSize, at most 4,000
	// messages per relay are in flight, and so published again after a crash.
	DefaultMinInFlight = 1
	DefaultMaxInFlight = 4
	// DefaultStoreTimeout bounds each database call of the relay: a claim,
	// and each acknowledgement, reschedule or kill of a batch.
	DefaultStoreTimeout = 5 * time.Second
	// StopGrace is how long after the publish timeout a stopping relay
	// still waits for the batches it claimed to be acknowledged: [Relay.Run]
	// returns at most the publish timeout plus StopGrace after its ctx is
	// cancelled, whatever the database and the broker do.
	StopGrace = 2 * time.Second
	// DefaultRelayTTL is how long an ordered relay counts as live in its
	// store's relay table ([Membership]) after its last heartbeat; it
	// heartbeats every third of it.
	DefaultRelayTTL = 10 * time.Second
)

// DeadPolicy says what ordered delivery does with an aggregate whose head message went dead.
type DeadPolicy int

const (
	// DeadBlocks holds the aggregate's later messages until an operator retries
	// or discards the dead one. The default: consumers never see a gap.
	DeadBlocks DeadPolicy = iota
	// DeadSkips lets the aggregate's later messages flow; consumers see a gap.
	DeadSkips
)

type relayConfig struct {
	minBatch         int
	maxBatch         int
	pollInterval     time.Duration
	minPollInterval  time.Duration
	minInFlight      int
	maxInFlight      int
	maxAttempts      int
	backoffBase      time.Duration
	backoffCap       time.Duration
	publishTimeout   time.Duration
	storeTimeout     time.Duration
	lease            time.Duration
	probeInterval    time.Duration
	maxProbeInterval time.Duration
	deleteSent       bool
	ordered          bool
	deadPolicy       DeadPolicy
	maxPayload       int
	logger           *slog.Logger
	hooks            []any
	name             string
	relayTTL         time.Duration
}

func defaultRelayConfig() relayConfig {
	return relayConfig{
		minBatch:         DefaultMinBatchSize,
		maxBatch:         DefaultMaxBatchSize,
		pollInterval:     DefaultPollInterval,
		minPollInterval:  DefaultMinPollInterval,
		minInFlight:      DefaultMinInFlight,
		maxInFlight:      DefaultMaxInFlight,
		maxAttempts:      DefaultMaxAttempts,
		backoffBase:      DefaultBackoffBase,
		backoffCap:       DefaultBackoffCap,
		publishTimeout:   DefaultPublishTimeout,
		storeTimeout:     DefaultStoreTimeout,
		lease:            DefaultLease,
		probeInterval:    DefaultProbeInterval,
		maxProbeInterval: DefaultMaxProbeInterval,
		maxPayload:       DefaultMaxPayloadSize,
		ordered:          true,
		deadPolicy:       DeadBlocks,
		logger:           slog.New(slog.DiscardHandler),
		relayTTL:         DefaultRelayTTL,
	}
}

func (c *relayConfig) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.minBatch >= 1 && c.minBatch <= c.maxBatch && c.maxBatch <= 100_000,
		"WithBatchSize or WithBatchSizeRange: %s is not between 1 and 100000", span(c.minBatch, c.maxBatch))
	check(c.pollInterval > 0, "WithPollInterval: %v is not positive", c.pollInterval)
	check(c.minPollInterval >= time.Millisecond, "WithMinPollInterval: %v is less than 1ms", c.minPollInterval)
	check(c.minInFlight >= 1 && c.minInFlight <= c.maxInFlight && c.maxInFlight <= 64,
		"WithMaxInFlight or WithMaxInFlightRange: %s is not between 1 and 64", span(c.minInFlight, c.maxInFlight))
	check(c.maxAttempts >= 1, "WithMaxAttempts: %d is less than 1", c.maxAttempts)
	check(c.backoffBase > 0, "WithBackoff: base %v is not positive", c.backoffBase)
	check(c.backoffCap >= c.backoffBase, "WithBackoff: cap %v is below base %v", c.backoffCap, c.backoffBase)
	check(c.publishTimeout > 0, "WithPublishTimeout: %v is not positive", c.publishTimeout)
	check(c.storeTimeout > 0, "WithStoreTimeout: %v is not positive", c.storeTimeout)
	check(c.lease >= 2*c.publishTimeout, "WithLease: %v is shorter than twice the publish timeout (%v)", c.lease, c.publishTimeout)
	check(c.probeInterval > 0 && c.maxProbeInterval >= c.probeInterval,
		"WithProbeInterval: %v..%v is not a positive range", c.probeInterval, c.maxProbeInterval)
	check(c.logger != nil, "WithLogger: logger is nil")
	check(c.relayTTL == 0 || c.relayTTL >= 300*time.Millisecond, "WithRelayTTL: %v is neither 0 nor at least 300ms", c.relayTTL)
	check(c.deadPolicy == DeadBlocks || c.deadPolicy == DeadSkips, "WithOrdering: unknown dead policy %d", c.deadPolicy)
	for i, h := range c.hooks {
		switch h.(type) {
		case HookBatch, HookClaim, HookMessage, HookDestination:
		default:
			errs = append(errs, fmt.Errorf("WithHooks: hook %d (%T) implements none of HookBatch, HookClaim, HookMessage, HookDestination", i, h))
		}
	}
	return errors.Join(errs...)
}

// span shows a range of sizes, or its one value when fixed.
func span(lo, hi int) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d..%d", lo, hi)
}

// duplicatesBound is how many messages a relay with these options may have
// claimed and not yet acknowledged at once: the largest batch times the most
// batches in flight. It bounds what a crash of the relay publishes again
// (at-least-once), and what the relay holds in memory.
func (c *relayConfig) duplicatesBound() int { return c.maxBatch * c.maxInFlight }

// RelayOption configures a [Relay]. The Relay is the package's main type, so
// its options are plain With<Setting>; those of other types carry the type's
// name ([WithWriterMaxPayloadSize]).
type RelayOption func(*relayConfig)

// WithBatchSize fixes how many rows one claim takes, at n, instead of
// letting the relay size its batches (see [WithBatchSizeRange]). It must be
// between 1 and 100000. Default: sized by the relay, between
// DefaultMinBatchSize (10) and DefaultMaxBatchSize (1000).
func WithBatchSize(n int) RelayOption { return func(c *relayConfig) { c.minBatch, c.maxBatch = n, n } }

// WithBatchSizeRange lets the relay size its batches between lo and hi rows:
// a claim that comes back full doubles the next one, up to hi, so a backlog
// drains in large batches; a claim that comes back short halves it (keeping
// it at least twice what the claim found), down to lo, so a trickle goes out
// in small batches; a claim that finds nothing halves it too. A claim
// slower than half the store timeout, or a batch slower than half the
// publish timeout, halves it as well, so that large batches do not
// make the database or the broker time out. hi × the most batches in flight
// ([WithMaxInFlightRange]) bounds what a crash publishes again. lo = hi is
// [WithBatchSize]. Both must be between 1 and 100000, lo at most hi.
// Default: DefaultMinBatchSize (10) to DefaultMaxBatchSize (1000).
func WithBatchSizeRange(lo, hi int) RelayOption {
	return func(c *relayConfig) { c.minBatch, c.maxBatch = lo, hi }
}

// WithPollInterval sets how long an idle relay waits before it looks for new
// rows again. A relay whose last claim came back full looks again at once;
// one whose last claim found some rows looks again after the minimum poll
// interval, and after a claim that finds nothing it waits a quarter of the
// time since it last found rows, until that reaches this interval (see
// [WithMinPollInterval]), about four intervals after the last rows. An idle
// relay therefore costs one claim per poll interval. A notification ([Relay.Notify], or a
// store that implements [Notifier]) cuts any wait short.
// Default: DefaultPollInterval (1 s).
func WithPollInterval(d time.Duration) RelayOption {
	return func(c *relayConfig) { c.pollInterval = d }
}

// WithMinPollInterval sets the shortest wait between claims while messages
// trickle in (adaptive polling): after a claim that found rows but not a full
// batch, the relay looks again after d (with [WithOrdering], as soon as one
// of its batches is acknowledged, if that comes first), and after a claim
// that finds nothing it waits a quarter of the time since it last found
// rows, at least d and at most the poll interval: the short pauses between
// the commits of a steady stream keep the wait at d, and a pause of the
// writers delays the next message by at most a quarter of its length. This
// gives databases without notifications (MySQL, SQLite) a latency of a few
// d under load without a busy loop (at most one claim per d), while an idle
// relay settles at one claim per poll interval. It must be at least 1 ms; a value
// above the poll interval acts as the poll interval.
// Default: DefaultMinPollInterval (2 ms).
func WithMinPollInterval(d time.Duration) RelayOption {
	return func(c *relayConfig) { c.minPollInterval = d }
}

// WithMaxInFlight sets how many claimed batches the relay may have at the
// broker at once (pipelining). With n > 1 the relay claims the next batch
// while earlier ones are being published, and settles (acknowledges,
// reschedules, kills) each batch as soon as the broker has answered for it,
// so a batch that waits for its publish timeout holds up no other; each is
// fenced by its own claim as always. Up to n × batch size messages are held
// in memory and in flight, a graceful stop finishes all of them, and up to n
// store calls of settling batches run at once, besides the claim. Per-aggregate ordering ([WithOrdering]) holds
// with any n, because a claim never hands out a message whose predecessor is
// still unacknowledged. It must be between 1 and 64. While the destination
// is down the relay probes with one batch at a time whatever n is.
// WithMaxInFlight fixes the number at n; [WithMaxInFlightRange] lets the
// relay choose it. Default: chosen by the relay, between
// DefaultMinInFlight (1) and DefaultMaxInFlight (4).
func WithMaxInFlight(n int) RelayOption {
	return func(c *relayConfig) { c.minInFlight, c.maxInFlight = n, n }
}

// WithMaxInFlightRange lets the relay choose how many batches it may have at
// the broker at once, between lo and hi (see [WithMaxInFlight] for what
// batches in flight do): when a claim had to wait for a batch in flight to
// settle (the broker is the bottleneck) and either came back short (messages
// trickling in waited) or came back full with batches at their largest (a
// backlog), it allows one batch more, up to hi; each empty claim allows
// one fewer, down to lo. hi × the largest batch ([WithBatchSizeRange]) bounds
// what a crash publishes again. lo = hi is [WithMaxInFlight]. Both must be
// between 1 and 64, lo at most hi.
// Default: DefaultMinInFlight (1) to DefaultMaxInFlight (4).
func WithMaxInFlightRange(lo, hi int) RelayOption {
	return func(c *relayConfig) { c.minInFlight, c.maxInFlight = lo, hi }
}

// WithMaxAttempts sets how many delivery attempts a message gets before it is
// marked dead. Attempts are counted when a row is claimed, so an attempt that
// crashed the relay counts too. Default: DefaultMaxAttempts (5).
func WithMaxAttempts(n int) RelayOption { return func(c *relayConfig) { c.maxAttempts = n } }

// WithBackoff sets the retry delay after failed attempt k to
// min(base × 2^(k-1), cap), with ±20% jitter. Default: DefaultBackoffBase (1 s)
// and DefaultBackoffCap (5 min).
func WithBackoff(base, cap time.Duration) RelayOption {
	return func(c *relayConfig) { c.backoffBase, c.backoffCap = base, cap }
}

// WithPublishTimeout bounds one Publish call, and so how long a graceful stop
// waits for the batch in flight: Run returns at most the publish timeout plus
// [StopGrace] after its ctx is cancelled. Default: DefaultPublishTimeout (3 s).
func WithPublishTimeout(d time.Duration) RelayOption {
	return func(c *relayConfig) { c.publishTimeout = d }
}

// WithStoreTimeout bounds each database call of the relay: a claim (the
// pool's connection check before it included), and each acknowledgement,
// reschedule or kill of a batch. A call that runs out of it fails with an
// error that wraps [ErrStoreTimeout]; the relay logs a warning ("database
// call timed out") and tries again after its usual store backoff, so a
// database that stopped answering is never a silent stall. Rows whose
// acknowledgement timed out are published again after their lease
// (at-least-once). Keep it well above the slowest claim the database may
// take under load. Default: DefaultStoreTimeout (5 s).
func WithStoreTimeout(d time.Duration) RelayOption {
	return func(c *relayConfig) { c.storeTimeout = d }
}

// WithLease sets how long a claim reserves its rows; a relay that dies holding
// them frees them after this long. It must be at least twice the publish
// timeout. Default: DefaultLease (30 s).
func WithLease(d time.Duration) RelayOption { return func(c *relayConfig) { c.lease = d } }

// WithProbeInterval sets how long the relay pauses when a destination is down
// as a whole before it tries again, doubling up to max while it stays down.
// Default: DefaultProbeInterval (2 s) up to DefaultMaxProbeInterval (30 s).
func WithProbeInterval(first, max time.Duration) RelayOption {
	return func(c *relayConfig) { c.probeInterval, c.maxProbeInterval = first, max }
}

// WithDeleteSent makes the relay delete rows once published instead of marking
// them sent (status 1). Deleting is cheaper for the database and keeps the
// table small; keeping lets `outbox status` count recent sends and leaves an
// audit trail for `outbox archive`. Default: false (keep).
func WithDeleteSent(del bool) RelayOption { return func(c *relayConfig) { c.deleteSent = del } }

// WithOrdering turns per-aggregate ordering on or off: for each aggregate (a row's
// aggregate_type and aggregate_id together), message k+1 is never published
// before the broker confirmed message k, in the order the rows were written,
// with any number of relays and across retries. Messages of different
// aggregates may go out in any order. [Message.PartitionKey] plays no part:
// it only tells the broker where to put a message, so keep it equal to the
// aggregate id (the default) or coarser, or the broker may spread out what
// the relay kept in order. policy says what a dead message does to its
// aggregate's later messages. Default: on, with DeadBlocks;
// WithOrdering(false, 0) turns it off for the last bit of throughput
// (docs/ordering.md says what it costs, and what writers must do so that
// write order is commit order).
func WithOrdering(on bool, policy DeadPolicy) RelayOption {
	return func(c *relayConfig) { c.ordered, c.deadPolicy = on, policy }
}

// WithMaxPayloadSize sets the largest payload the relay sends; a larger
// row (written by another program) is marked dead at once, with the
// payload's size in the reason. The relay passes the limit to the claim
// (ClaimParams.MaxPayload), so the stores of this module never read such a
// payload into memory, only its size. 0 or less means no limit. (The
// Writer's limit is [WithWriterMaxPayloadSize].) Default:
// DefaultMaxPayloadSize (1 MiB).
func WithMaxPayloadSize(n int) RelayOption { return func(c *relayConfig) { c.maxPayload = n } }

// WithRelayMaxPayloadSize is [WithMaxPayloadSize].
//
// Deprecated: use WithMaxPayloadSize.
func WithRelayMaxPayloadSize(n int) RelayOption { return WithMaxPayloadSize(n) }

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) RelayOption { return func(c *relayConfig) { c.logger = l } }

// WithName names the relay in logs and metrics. Default: empty.
func WithName(name string) RelayOption { return func(c *relayConfig) { c.name = name } }

// WithRelayTTL sets how long an ordered relay counts as live in its store's
// table of relays ([Membership]) after its last heartbeat; it heartbeats
// every third of ttl, off the claim path (a few short statements each time).
// The relays of a table use the table to split its aggregates into slots,
// one per relay, and a relay draining a backlog claims the rows of its own
// slot's aggregates first (see [ClaimParams].Slots): a preference that makes
// claims meet less, never a lock, so a stale view costs speed, never order.
// 0 turns membership and the preference off. Only ordered relays on a store
// that implements Membership use it. Default: DefaultRelayTTL (10 s).
func WithRelayTTL(ttl time.Duration) RelayOption { return func(c *relayConfig) { c.relayTTL = ttl } }

// WithHooks adds observers of the relay. Each hook implements one or more of
// [HookBatch], [HookClaim], [HookMessage] and [HookDestination]; a hook that
// implements none of them (or is nil) makes [NewRelay] return an error. The
// relay calls them synchronously, so they must be fast. Default: none.
func WithHooks(hooks ...any) RelayOption {
	return func(c *relayConfig) { c.hooks = append(c.hooks, hooks...) }
}
