package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/redisfilter"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// redisAddr returns host:port of the test Redis.
func redisAddr(t testing.TB) string {
	u, err := url.Parse(testsvc.RedisURL(t))
	require.NoError(t, err)
	return u.Host
}

// filterSetup is an inbox behind a Redis filter whose connection runs
// through a fault proxy.
type filterSetup struct {
	tdb    *testDB
	proxy  *faultproxy.Proxy
	rdb    *redis.Client // through the proxy
	direct *redis.Client // straight to Redis, for the test's own checks
	filter *redisfilter.Filter
	prefix string
	tally  *tally
	calls  atomic.Int64 // Claim calls
	errs   atomic.Int64 // failed filter calls
}

func newFilterSetup(t *testing.T, d inbox.Dialect) *filterSetup {
	t.Helper()
	s := &filterSetup{tdb: newTestDB(t, d), tally: &tally{}}
	s.direct = redisClient(t, "")
	s.proxy = faultproxy.New(t, redisAddr(t))
	s.rdb = redisClient(t, s.proxy.Addr())
	s.prefix = "inbox_test:" + testsvc.Name(t) + ":"
	t.Cleanup(func() { deleteKeys(t, s.direct, s.prefix) })
	var err error
	s.filter, err = redisfilter.New(s.rdb, redisfilter.WithPrefix(s.prefix))
	require.NoError(t, err)
	return s
}

// inbox returns a new inbox instance (own pool) behind the filter.
func (s *filterSetup) inbox(t *testing.T) *inbox.Inbox {
	f := countingFilter{Filter: s.filter, calls: &s.calls, errs: &s.errs}
	return newInbox(t, s.tdb.open(), s.tdb.dialect, inbox.WithConsumer("shipping"), inbox.WithFilter(f),
		inbox.WithFilterTimeout(50*time.Millisecond), inbox.WithFilterCooldown(100*time.Millisecond),
		inbox.WithHooks(s.tally))
}

// TestRedisFilterFaults delivers every message three times, concurrently,
// from two consumer instances, while Redis is flushed, cut off, slowed down
// or silenced in the middle of the run: every effect still happens exactly
// once. After the fault heals, duplicates take the fast path again.
func TestRedisFilterFaults(t *testing.T) {
	t.Parallel()
	faults := []struct {
		name        string
		fault, heal func(s *filterSetup)
	}{
		{"Flushed", func(s *filterSetup) { require.Positive(t, deleteKeys(t, s.direct, s.prefix)) }, func(*filterSetup) {}},
		{"Stopped", func(s *filterSetup) { s.proxy.Cut() }, func(s *filterSetup) { s.proxy.Restore() }},
		{"Slow", func(s *filterSetup) { s.proxy.Latency(300 * time.Millisecond) }, func(s *filterSetup) { s.proxy.Restore() }},
		{"Silent", func(s *filterSetup) { s.proxy.Blackhole() }, func(s *filterSetup) { s.proxy.Restore() }},
	}
	for _, d := range dialects {
		for _, f := range faults {
			t.Run(string(d)+"/"+f.name, func(t *testing.T) {
				t.Parallel()
				s := newFilterSetup(t, d)
				ins := []*inbox.Inbox{s.inbox(t), s.inbox(t)}
				const messages, copies = 30, 3
				var deliveries []string
				for m := range messages {
					for range copies {
						deliveries = append(deliveries, fmt.Sprintf("msg-%02d", m))
					}
				}
				rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })

				work := make(chan string)
				var wg sync.WaitGroup
				for w := range 6 {
					h := s.tdb.effectHandler(w)
					wg.Go(func() {
						for id := range work {
							_, err := ins[w%2].Process(context.Background(), message(id), h)
							if err != nil {
								t.Errorf("process %s: %v", id, err)
							}
						}
					})
				}
				for i, id := range deliveries {
					switch i {
					case len(deliveries) / 3:
						f.fault(s)
					case 2 * len(deliveries) / 3:
						f.heal(s)
					}
					work <- id
				}
				close(work)
				wg.Wait()

				effects := s.tdb.effects(t)
				require.Len(t, effects, messages)
				for id, n := range effects {
					require.Equal(t, 1, n, "effects of %s", id)
				}
				require.Equal(t, int64(messages), s.tally.processed.Load())
				require.Equal(t, int64(messages*(copies-1)), s.tally.duplicate.Load())
				if f.name != "Flushed" {
					require.Positive(t, s.errs.Load(), "the fault never reached the filter")
				}

				// Healed: once the cooldown passed, a duplicate skips the database.
				fast := s.tally.fast.Load()
				testsvc.Eventually(t, 10*time.Second, func() bool {
					out, err := ins[0].Process(context.Background(), message("msg-00"), s.tdb.effectHandler(9))
					require.NoError(t, err)
					require.Equal(t, inbox.Duplicate, out)
					return s.tally.fast.Load() > fast
				}, "duplicates never took the fast path after the fault healed")
				require.Equal(t, 1, s.tdb.effects(t)["msg-00"])
			})
		}
	}
}

// TestRedisFilterMarks checks what the filter leaves in Redis: done only after
// a commit, nothing after a handler failure, and a stale in-flight mark or a
// lost key never makes the inbox skip a message.
func TestRedisFilterMarks(t *testing.T) {
	t.Parallel()
	s := newFilterSetup(t, inbox.Postgres)
	in := s.inbox(t)
	ctx := context.Background()
	key := func(id string) string { return s.filter.Key("shipping", id) }
	get := func(id string) string {
		v, err := s.direct.Get(ctx, key(id)).Result()
		if errors.Is(err, redis.Nil) {
			return "<absent>"
		}
		require.NoError(t, err)
		return v
	}
	process := func(id string, h inbox.Handler) (inbox.Outcome, error) { return in.Process(ctx, message(id), h) }
	effect := s.tdb.effectHandler(0)

	t.Run("HandlerFailureIsNotDone", func(t *testing.T) {
		boom := errors.New("boom")
		var markDuringHandler string
		_, err := process("fail-1", func(context.Context, *sql.Tx, *outbox.Message) error {
			markDuringHandler = get("fail-1")
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.Regexp(t, "^inflight:", markDuringHandler)
		require.Equal(t, "<absent>", get("fail-1"), "the in-flight mark outlived the failed handler")

		out, err := process("fail-1", effect)
		require.NoError(t, err)
		require.Equal(t, inbox.Processed, out)
		require.Equal(t, "done", get("fail-1"))
		require.Equal(t, 1, s.tdb.effects(t)["fail-1"])
	})

	t.Run("DoneSkipsTheDatabase", func(t *testing.T) {
		_, err := process("done-1", effect)
		require.NoError(t, err)
		fast := s.tally.fast.Load()
		out, err := process("done-1", effect)
		require.NoError(t, err)
		require.Equal(t, inbox.Duplicate, out)
		require.Equal(t, fast+1, s.tally.fast.Load())
	})

	t.Run("LostKeyIsRepairedFromTheDatabase", func(t *testing.T) {
		_, err := process("lost-1", effect)
		require.NoError(t, err)
		require.NoError(t, s.direct.Del(ctx, key("lost-1")).Err())
		fast := s.tally.fast.Load()
		out, err := process("lost-1", effect)
		require.NoError(t, err)
		require.Equal(t, inbox.Duplicate, out)
		require.Equal(t, fast, s.tally.fast.Load(), "the database, not Redis, found this duplicate")
		require.Equal(t, "done", get("lost-1"))
		require.Equal(t, 1, s.tdb.effects(t)["lost-1"])
	})

	t.Run("StaleInFlightMarkDoesNotSkip", func(t *testing.T) {
		// A consumer died between its claim and its commit.
		require.NoError(t, s.direct.Set(ctx, key("stale-1"), "inflight:dead-consumer", time.Minute).Err())
		out, err := process("stale-1", effect)
		require.NoError(t, err)
		require.Equal(t, inbox.Processed, out)
		require.Equal(t, "done", get("stale-1"))
		require.Equal(t, 1, s.tdb.effects(t)["stale-1"])
	})

	t.Run("ReleaseKeepsAnotherMark", func(t *testing.T) {
		done, token, err := s.filter.Claim(ctx, "shipping", "rel-1")
		require.NoError(t, err)
		require.False(t, done)
		require.NotEmpty(t, token)
		require.NoError(t, s.filter.Done(ctx, "shipping", "rel-1")) // another delivery committed meanwhile
		require.NoError(t, s.filter.Release(ctx, "shipping", "rel-1", token))
		require.Equal(t, "done", get("rel-1"))
	})
}

// TestRedisFilterBypassIsBounded: with Redis silent, a Process costs at most
// about one filter timeout per cooldown, not one per call.
func TestRedisFilterBypassIsBounded(t *testing.T) {
	t.Parallel()
	s := newFilterSetup(t, inbox.SQLite)
	var calls atomic.Int64
	counting := countingFilter{Filter: s.filter, calls: &calls}
	in := newInbox(t, s.tdb.db, inbox.SQLite, inbox.WithFilter(counting),
		inbox.WithFilterTimeout(50*time.Millisecond), inbox.WithFilterCooldown(time.Hour))
	s.proxy.Blackhole()
	for i := range 20 {
		_, err := in.Process(context.Background(), message(fmt.Sprintf("m-%d", i)), s.tdb.effectHandler(0))
		require.NoError(t, err)
	}
	require.Equal(t, int64(1), calls.Load(), "the filter was called again during its cooldown")
	require.Len(t, s.tdb.effects(t), 20)
}

// countingFilter counts Claim calls and failed calls of the filter it wraps.
type countingFilter struct {
	inbox.Filter
	calls, errs *atomic.Int64
}

func (f countingFilter) count(err error) error {
	if err != nil && f.errs != nil {
		f.errs.Add(1)
	}
	return err
}

func (f countingFilter) Claim(ctx context.Context, consumer, id string) (bool, string, error) {
	f.calls.Add(1)
	done, token, err := f.Filter.Claim(ctx, consumer, id)
	return done, token, f.count(err)
}

func (f countingFilter) Done(ctx context.Context, consumer, id string) error {
	return f.count(f.Filter.Done(ctx, consumer, id))
}

func (f countingFilter) Release(ctx context.Context, consumer, id, token string) error {
	return f.count(f.Filter.Release(ctx, consumer, id, token))
}
