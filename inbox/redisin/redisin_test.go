package redisin_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/internal/consume"
	"github.com/outboxkit/outbox/inbox/internal/consumetest"
	"github.com/outboxkit/outbox/inbox/redisin"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/redispub"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConsumer(t *testing.T) {
	t.Parallel()
	consumetest.Run(t, func(t *testing.T) consumetest.Broker { return newBroker(t) })
}

// claimIdle is short so that the suite's stopped consumer's entry is claimed
// quickly, and long enough that an entry waiting for a busy worker is not.
const claimIdle = 2 * time.Second

// broker is a stream and a dead-letter stream on the real Redis, fed through redispub.
type broker struct {
	rdb                 *redis.Client
	pub                 *redispub.Publisher
	stream, dead, group string
}

func newBroker(t *testing.T) *broker {
	opt, err := redis.ParseURL(testsvc.RedisURL(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	name := "inbox_test:" + testsvc.Name(t)
	b := &broker{rdb: rdb, stream: name, dead: name + ":dead", group: "shipping"}
	t.Cleanup(func() { rdb.Del(context.Background(), b.stream, b.dead) })
	b.pub, err = redispub.New(rdb)
	require.NoError(t, err)
	return b
}

func (b *broker) Publish(t *testing.T, msgs ...*outbox.Message) {
	for _, m := range msgs {
		m.Topic = b.stream
	}
	for i, err := range b.pub.Publish(context.Background(), msgs) {
		require.NoError(t, err, "publish %s", msgs[i].MessageID)
	}
}

func (b *broker) Consumer(t *testing.T, in *inbox.Inbox, h inbox.Handler, s consumetest.Settings) consumetest.Runner {
	opts := []redisin.Option{redisin.WithConcurrency(s.Concurrency), redisin.WithOrderedKeys(s.Ordered),
		redisin.WithMaxAttempts(s.MaxAttempts), redisin.WithRetryBackoff(s.RetryBase, 10*s.RetryBase),
		redisin.WithHooks(s.Hooks...), redisin.WithClaimIdle(claimIdle)}
	if s.DeadLetter {
		opts = append(opts, redisin.WithDeadLetterStream(b.dead))
	}
	c, err := redisin.New(b.rdb, b.stream, b.group, in, h, opts...)
	require.NoError(t, err)
	return c
}

func (b *broker) DeadLetters(t *testing.T) []*outbox.Message {
	entries, err := b.rdb.XRange(context.Background(), b.dead, "-", "+").Result()
	require.NoError(t, err)
	var out []*outbox.Message
	for _, e := range entries {
		h := map[string]string{}
		require.NoError(t, json.Unmarshal([]byte(e.Values[redispub.FieldHeaders].(string)), &h))
		m := consume.MessageFromHeaders(h, []byte(e.Values[redispub.FieldPayload].(string)))
		m.MessageID = e.Values[redispub.FieldMessageID].(string)
		out = append(out, m)
	}
	return out
}

// Drained: the group read every entry and acknowledged all it read.
func (b *broker) Drained(t *testing.T) bool {
	ctx := context.Background()
	groups, err := b.rdb.XInfoGroups(ctx, b.stream).Result()
	require.NoError(t, err)
	for _, g := range groups {
		if g.Name == b.group {
			return g.Pending == 0 && g.Lag == 0
		}
	}
	return false
}

// Bounce delivers the next entry to a consumer that never acknowledges it,
// then has another take it over (XCLAIM), as if both had crashed.
func (b *broker) Bounce(t *testing.T, times int) {
	ctx := context.Background()
	require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, b.stream, b.group, "0").Err())
	res, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "crashed-0",
		Streams: []string{b.stream, ">"}, Count: 1}).Result()
	require.NoError(t, err)
	id := res[0].Messages[0].ID
	for i := 1; i < times; i++ {
		_, err := b.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: b.stream, Group: b.group,
			Consumer: "crashed-" + string(rune('0'+i)), Messages: []string{id}}).Result()
		require.NoError(t, err)
	}
	p, err := b.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: b.stream, Group: b.group, Start: id, End: id, Count: 1}).Result()
	require.NoError(t, err)
	require.Equal(t, int64(times), p[0].RetryCount)
}

// TestRestartReadsOwnPending: a consumer that restarts under its name
// processes the entries it had read but not acknowledged, without waiting
// for the claim idle time.
func TestRestartReadsOwnPending(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	ctx := context.Background()
	b.Publish(t, &outbox.Message{MessageID: "m-1", AggregateType: "order", AggregateID: "1", EventType: "E", Payload: []byte(`{}`)})
	require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, b.stream, b.group, "0").Err())
	_, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "me", Streams: []string{b.stream, ">"}}).Result()
	require.NoError(t, err) // read, then "crashed"

	in, err := inbox.New(sqliteDB(t), inbox.SQLite)
	require.NoError(t, err)
	require.NoError(t, in.Migrate(ctx))
	got := make(chan string, 1)
	c, err := redisin.New(b.rdb, b.stream, b.group, in, func(_ context.Context, _ *sql.Tx, m *outbox.Message) error {
		got <- m.MessageID
		return nil
	}, redisin.WithConsumerName("me"), redisin.WithClaimIdle(time.Hour))
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	select {
	case id := <-got:
		require.Equal(t, "m-1", id)
	case <-time.After(10 * time.Second):
		t.Fatal("the pending entry was not re-read")
	}
	testsvc.Eventually(t, 10*time.Second, func() bool { return b.Drained(t) }, "entry not acknowledged")
}

func sqliteDB(t *testing.T) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+testsvc.SQLitePath(t)+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	in, err := inbox.New(sqliteDB(t), inbox.SQLite)
	require.NoError(t, err)
	noop := func(context.Context, *sql.Tx, *outbox.Message) error { return nil }
	for _, tc := range []struct {
		name, stream, group string
		opt                 redisin.Option
		wantErr             string
	}{
		{"Defaults", "s", "g", redisin.WithLogger(slog.New(slog.DiscardHandler)), ""},
		{"NoStream", "", "g", redisin.WithConcurrency(1), "stream or group"},
		{"NoGroup", "s", "", redisin.WithConcurrency(1), "stream or group"},
		{"ClaimIdle", "s", "g", redisin.WithClaimIdle(0), "WithClaimIdle"},
		{"Concurrency", "s", "g", redisin.WithConcurrency(0), "WithConcurrency"},
		{"MaxAttempts", "s", "g", redisin.WithMaxAttempts(0), "WithMaxAttempts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redisin.New(rdb, tc.stream, tc.group, in, noop, tc.opt)
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.NotEmpty(t, c.Name())
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
