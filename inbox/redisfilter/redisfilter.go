package redisfilter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox/inbox"
)

var _ inbox.Filter = (*Filter)(nil)

// Defaults of the filter's options.
const (
	// DefaultPrefix starts every key the Redis filter writes.
	DefaultPrefix = "inbox:"
	// DefaultDoneTTL is how long Redis remembers a processed message.
	DefaultDoneTTL = 24 * time.Hour
	// DefaultClaimTTL is how long an in-flight mark lives if its owner
	// dies before releasing it.
	DefaultClaimTTL = 30 * time.Second
)

// The values a Filter stores: done, or the in-flight prefix and a token.
const (
	valueDone     = "done"
	valueInFlight = "inflight:"
)

// releaseScript deletes the key only while it still holds the caller's mark.
var releaseScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// Filter is an [inbox.Filter] on Redis. Claim is one SET key inflight:token NX
// PX claimTTL GET: when the key was absent the message is marked in flight;
// when it holds "done" the message is a duplicate; an in-flight mark of
// another delivery sends this one to the database, which waits for the other
// transaction and decides. Done sets "done" with the done TTL, only after the
// inbox committed (or found the row committed), so Redis never calls a
// message done whose handler failed. A Redis that is down, slow, or lost
// its keys makes the inbox ask the database: slower, never wrong.
//
// Redis 7.0+ (SET with both NX and GET). A Filter is safe for
// concurrent use; it never closes the client.
type Filter struct {
	rdb      redis.UniversalClient
	prefix   string
	doneTTL  time.Duration
	claimTTL time.Duration
}

// Option configures a [Filter].
type Option func(*Filter)

// WithPrefix sets the prefix of the filter's keys; the key of a message
// is prefix + consumer + ":" + message id. Default: DefaultPrefix ("inbox:").
func WithPrefix(p string) Option { return func(f *Filter) { f.prefix = p } }

// WithTTL sets how long Redis remembers a processed message (done) and
// how long an in-flight mark outlives a consumer that died holding it
// (claim). A done TTL longer than the inbox's retention is harmless: a done
// mark is always true. Default: DefaultDoneTTL (24 h) and
// DefaultClaimTTL (30 s).
func WithTTL(done, claim time.Duration) Option {
	return func(f *Filter) { f.doneTTL, f.claimTTL = done, claim }
}

// New returns a filter on rdb. It returns an error for a
// non-positive TTL. It panics if rdb is nil, a programmer error.
func New(rdb redis.UniversalClient, opts ...Option) (*Filter, error) {
	if rdb == nil {
		panic("redisfilter: New with a nil client")
	}
	f := &Filter{rdb: rdb, prefix: DefaultPrefix, doneTTL: DefaultDoneTTL, claimTTL: DefaultClaimTTL}
	for _, o := range opts {
		o(f)
	}
	if f.doneTTL <= 0 || f.claimTTL <= 0 {
		return nil, fmt.Errorf("redisfilter: new: WithTTL: %v and %v must be positive", f.doneTTL, f.claimTTL)
	}
	return f, nil
}

// Key returns the Redis key of a message for a consumer.
func (f *Filter) Key(consumer, messageID string) string {
	return f.prefix + consumer + ":" + messageID
}

// Claim implements [inbox.Filter].
func (f *Filter) Claim(ctx context.Context, consumer, messageID string) (bool, string, error) {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	token := valueInFlight + hex.EncodeToString(b[:])
	old, err := f.rdb.SetArgs(ctx, f.Key(consumer, messageID), token,
		redis.SetArgs{Mode: "NX", TTL: f.claimTTL, Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil): // the key was absent: now it is our mark
		return false, token, nil
	case err != nil:
		return false, "", err
	}
	return old == valueDone, "", nil
}

// Done implements [inbox.Filter].
func (f *Filter) Done(ctx context.Context, consumer, messageID string) error {
	return f.rdb.Set(ctx, f.Key(consumer, messageID), valueDone, f.doneTTL).Err()
}

// Release implements [inbox.Filter].
func (f *Filter) Release(ctx context.Context, consumer, messageID, token string) error {
	return releaseScript.Run(ctx, f.rdb, []string{f.Key(consumer, messageID)}, token).Err()
}
