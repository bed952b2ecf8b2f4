package inbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Filter is a fast, fallible pre-check in front of the inbox table (see
// [WithFilter]). The inbox calls Claim before its transaction; after it,
// Done when the message is known committed (processed now or a duplicate
// found in the table) or Release with Claim's token when the handler failed
// or the outcome is unknown. Errors are never fatal: the inbox logs them and
// goes to the database. Implementations are safe for concurrent use.
type Filter interface {
	// Claim reports done = true only when the message is certainly committed,
	// so the inbox may skip it without asking the database. Otherwise it may
	// mark the message in flight and return a non-empty token for Release.
	Claim(ctx context.Context, consumer, messageID string) (done bool, token string, err error)
	// Done remembers that the message is committed.
	Done(ctx context.Context, consumer, messageID string) error
	// Release forgets the in-flight mark made by the Claim that returned
	// token, unless something else (Done, another claim) replaced it.
	Release(ctx context.Context, consumer, messageID, token string) error
}

// Defaults of the Redis filter's options.
const (
	// DefaultRedisPrefix starts every key the Redis filter writes.
	DefaultRedisPrefix = "inbox:"
	// DefaultRedisDoneTTL is how long Redis remembers a processed message.
	DefaultRedisDoneTTL = 24 * time.Hour
	// DefaultRedisClaimTTL is how long an in-flight mark lives if its owner
	// dies before releasing it.
	DefaultRedisClaimTTL = 30 * time.Second
)

// The values a RedisFilter stores: done, or the in-flight prefix and a token.
const (
	redisDone     = "done"
	redisInFlight = "inflight:"
)

// releaseScript deletes the key only while it still holds the caller's mark.
var releaseScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// RedisFilter is a [Filter] on Redis. Claim is one SET key inflight:token NX
// PX claimTTL GET: when the key was absent the message is marked in flight;
// when it holds "done" the message is a duplicate; an in-flight mark of
// another delivery sends this one to the database, which waits for the other
// transaction and decides. Done sets "done" with the done TTL, only after the
// inbox committed (or found the row committed), so Redis never calls a
// message done whose handler failed. A Redis that is down, slow, or lost
// its keys makes the inbox ask the database: slower, never wrong.
//
// Redis 7.0+ (SET with both NX and GET). A RedisFilter is safe for
// concurrent use; it never closes the client.
type RedisFilter struct {
	rdb      redis.UniversalClient
	prefix   string
	doneTTL  time.Duration
	claimTTL time.Duration
}

// RedisOption configures a [RedisFilter].
type RedisOption func(*RedisFilter)

// WithRedisPrefix sets the prefix of the filter's keys; the key of a message
// is prefix + consumer + ":" + message id. Default: DefaultRedisPrefix ("inbox:").
func WithRedisPrefix(p string) RedisOption { return func(f *RedisFilter) { f.prefix = p } }

// WithRedisTTL sets how long Redis remembers a processed message (done) and
// how long an in-flight mark outlives a consumer that died holding it
// (claim). A done TTL longer than the inbox's retention is harmless: a done
// mark is always true. Default: DefaultRedisDoneTTL (24 h) and
// DefaultRedisClaimTTL (30 s).
func WithRedisTTL(done, claim time.Duration) RedisOption {
	return func(f *RedisFilter) { f.doneTTL, f.claimTTL = done, claim }
}

// NewRedisFilter returns a filter on rdb. It returns an error for a
// non-positive TTL. It panics if rdb is nil, a programmer error.
func NewRedisFilter(rdb redis.UniversalClient, opts ...RedisOption) (*RedisFilter, error) {
	if rdb == nil {
		panic("inbox: NewRedisFilter with a nil client")
	}
	f := &RedisFilter{rdb: rdb, prefix: DefaultRedisPrefix, doneTTL: DefaultRedisDoneTTL, claimTTL: DefaultRedisClaimTTL}
	for _, o := range opts {
		o(f)
	}
	if f.doneTTL <= 0 || f.claimTTL <= 0 {
		return nil, fmt.Errorf("inbox: new redis filter: WithRedisTTL: %v and %v must be positive", f.doneTTL, f.claimTTL)
	}
	return f, nil
}

// Key returns the Redis key of a message for a consumer.
func (f *RedisFilter) Key(consumer, messageID string) string {
	return f.prefix + consumer + ":" + messageID
}

// Claim implements [Filter].
func (f *RedisFilter) Claim(ctx context.Context, consumer, messageID string) (bool, string, error) {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	token := redisInFlight + hex.EncodeToString(b[:])
	old, err := f.rdb.SetArgs(ctx, f.Key(consumer, messageID), token,
		redis.SetArgs{Mode: "NX", TTL: f.claimTTL, Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil): // the key was absent: now it is our mark
		return false, token, nil
	case err != nil:
		return false, "", err
	}
	return old == redisDone, "", nil
}

// Done implements [Filter].
func (f *RedisFilter) Done(ctx context.Context, consumer, messageID string) error {
	return f.rdb.Set(ctx, f.Key(consumer, messageID), redisDone, f.doneTTL).Err()
}

// Release implements [Filter].
func (f *RedisFilter) Release(ctx context.Context, consumer, messageID, token string) error {
	return releaseScript.Run(ctx, f.rdb, []string{f.Key(consumer, messageID)}, token).Err()
}
