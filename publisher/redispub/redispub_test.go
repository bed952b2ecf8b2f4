package redispub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/publishertest"
	"github.com/outboxkit/outbox/publisher/redispub"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // the Down and Outage cases make the pool log every failed dial
	goleak.VerifyTestMain(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// client returns a client on the test Redis, closed when t ends.
func client(t *testing.T, rawURL string) *redis.Client {
	t.Helper()
	c, err := redispub.NewClient(rawURL)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// stream names a stream for t and deletes it, and its dedup keys, when t ends.
func stream(t *testing.T, admin *redis.Client, prefix string) string {
	t.Helper()
	name := testsvc.Name(t)
	t.Cleanup(func() {
		ctx := context.Background()
		key := prefix + name
		admin.Del(ctx, key)
		iter := admin.Scan(ctx, 0, "{"+key+"}:outbox-dedup:*", 1000).Iterator()
		for iter.Next(ctx) {
			admin.Del(ctx, iter.Val())
		}
	})
	return name
}

func newPublisher(t *testing.T, c redis.UniversalClient, opts ...redispub.Option) *redispub.Publisher {
	t.Helper()
	p, err := redispub.New(c, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// receiver reads a stream from the start with XREAD.
type receiver struct {
	client *redis.Client
	stream string
	topic  string // what the suite named the destination
	last   string
}

func (r *receiver) Receive(ctx context.Context, n int) ([]publishertest.Received, error) {
	var out []publishertest.Received
	if r.last == "" {
		r.last = "0"
	}
	for len(out) < n {
		// Block a little less than ctx allows, so that the read never races
		// the deadline; the last moments are spent waiting on ctx itself.
		block := time.Second
		if d, ok := ctx.Deadline(); ok {
			block = min(block, time.Until(d)-50*time.Millisecond)
		}
		if block < 10*time.Millisecond {
			<-ctx.Done()
			return out, ctx.Err()
		}
		res, err := r.client.XRead(context.WithoutCancel(ctx), &redis.XReadArgs{
			Streams: []string{r.stream, r.last}, Count: int64(n - len(out)), Block: block,
		}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return out, err
		}
		for _, msg := range res[0].Messages {
			out = append(out, decode(msg, r.topic))
			r.last = msg.ID
		}
	}
	return out, nil
}

func decode(msg redis.XMessage, topic string) publishertest.Received {
	str := func(k string) string { s, _ := msg.Values[k].(string); return s }
	var h map[string]string
	_ = json.Unmarshal([]byte(str(redispub.FieldHeaders)), &h)
	return publishertest.Received{
		MessageID:   str(redispub.FieldMessageID),
		Key:         str(redispub.FieldKey),
		Topic:       topic,
		Headers:     h,
		Payload:     []byte(str(redispub.FieldPayload)),
		ContentType: str(redispub.FieldContentType),
	}
}

const suitePrefix = "outbox:"

// TestSuite runs the shared publisher conformance suite on the real Redis,
// without and with publish-side dedup.
func TestSuite(t *testing.T) {
	rawURL := testsvc.RedisURL(t)
	const limit = 1 << 20
	for _, tc := range []struct {
		name  string
		dedup bool
	}{{"Plain", false}, {"Dedup", true}} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []redispub.Option{redispub.WithStreamPrefix(suitePrefix), redispub.WithMaxPayloadSize(limit)}
			if tc.dedup {
				opts = append(opts, redispub.WithDedup(10*time.Minute))
			}
			publishertest.Run(t, publishertest.Features{
				OrderedPerKey:   true, // one stream, one pipeline after another
				Dedup:           tc.dedup,
				Headers:         true,
				ContentType:     true,
				MaxPayload:      limit,
				TooLargePayload: limit + 1, // refused by WithMaxPayloadSize
			}, publishertest.Harness{
				New: func(t *testing.T) publishertest.Dest {
					admin := client(t, rawURL)
					name := stream(t, admin, suitePrefix)
					return publishertest.Dest{
						Publisher: newPublisher(t, client(t, rawURL), opts...),
						Receiver:  &receiver{client: admin, stream: suitePrefix + name, topic: name},
						Topic:     name,
					}
				},
				Outage: func(t *testing.T) publishertest.OutageDest {
					admin := client(t, rawURL)
					name := stream(t, admin, suitePrefix)
					u, err := url.Parse(rawURL)
					require.NoError(t, err)
					proxy := faultproxy.New(t, u.Host)
					u.Host = proxy.Addr()
					return publishertest.OutageDest{
						Dest: publishertest.Dest{
							Publisher: newPublisher(t, client(t, u.String()), opts...),
							Receiver:  &receiver{client: admin, stream: suitePrefix + name, topic: name},
							Topic:     name,
						},
						Cut:     proxy.Cut,
						Restore: proxy.Restore,
						Stall:   proxy.Blackhole,
					}
				},
				Down: func(t *testing.T) outbox.Publisher {
					return newPublisher(t, client(t, "redis://127.0.0.1:"+strconv.Itoa(freePort(t))+"/0"), opts...)
				},
			})
		})
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func message(topic, agg string, seq int) *outbox.Message {
	return &outbox.Message{
		MessageID:     outbox.NewMessageID(),
		AggregateType: "order",
		AggregateID:   agg,
		EventType:     "ORDER_PAID",
		Topic:         topic,
		Payload:       json.RawMessage(fmt.Sprintf(`{"order":%q,"seq":%d}`, agg, seq)),
		Headers:       map[string]string{"tenant": "acme"},
	}
}

func requireAllNil(t *testing.T, errs []error, n int) {
	t.Helper()
	require.Len(t, errs, n)
	for i, err := range errs {
		require.NoError(t, err, "message %d", i)
	}
}

func TestEntryFields(t *testing.T) {
	t.Parallel()
	c := client(t, testsvc.RedisURL(t))
	name := stream(t, c, "")
	p := newPublisher(t, c)

	m := message(name, "ord-1", 0)
	m.PartitionKey = "pk-1"
	m.CreatedAt = time.Date(2025, 3, 4, 5, 6, 7, 891011000, time.FixedZone("X", 3600))
	m.Headers[outbox.HeaderTraceparent] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{m}), 1)

	entries, err := c.XRange(t.Context(), name, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 1)
	v := entries[0].Values
	require.Equal(t, m.MessageID, v[redispub.FieldMessageID])
	require.Equal(t, "pk-1", v[redispub.FieldKey])
	require.Equal(t, "order", v[redispub.FieldAggregateType])
	require.Equal(t, "ord-1", v[redispub.FieldAggregateID])
	require.Equal(t, "ORDER_PAID", v[redispub.FieldEventType])
	require.Equal(t, string(m.Payload), v[redispub.FieldPayload])
	require.Equal(t, outbox.ContentTypeJSON, v[redispub.FieldContentType])
	require.Equal(t, "2025-03-04T04:06:07.891011Z", v[redispub.FieldCreatedAt])
	var h map[string]string
	require.NoError(t, json.Unmarshal([]byte(v[redispub.FieldHeaders].(string)), &h))
	require.Equal(t, m.StandardHeaders(), h)
	require.Len(t, v, 9, "fields: %v", v)
}

func TestMaxLenTrims(t *testing.T) {
	t.Parallel()
	c := client(t, testsvc.RedisURL(t))
	name := stream(t, c, "")
	p := newPublisher(t, c, redispub.WithMaxLen(100))
	for b := range 10 {
		msgs := make([]*outbox.Message, 100)
		for i := range msgs {
			msgs[i] = message(name, "a", b*100+i)
		}
		requireAllNil(t, p.Publish(t.Context(), msgs), len(msgs))
	}
	n, err := c.XLen(t.Context(), name).Result()
	require.NoError(t, err)
	// Approximate trimming keeps whole nodes (100 entries each by default).
	require.GreaterOrEqual(t, n, int64(100))
	require.Less(t, n, int64(300))
}

func TestDedup(t *testing.T) {
	t.Parallel()
	c := client(t, testsvc.RedisURL(t))
	name := stream(t, c, "")
	const ttl = 300 * time.Millisecond
	p := newPublisher(t, c, redispub.WithDedup(ttl), redispub.WithMaxLen(1000),
		redispub.WithFreshScript(name)) // the first call meets NOSCRIPT and loads it

	msgs := []*outbox.Message{message(name, "a", 0), message(name, "a", 1)}
	requireAllNil(t, p.Publish(t.Context(), msgs), 2)
	requireAllNil(t, p.Publish(t.Context(), msgs), 2) // re-send: confirmed, not appended
	entries, err := c.XRange(t.Context(), name, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 2)

	key := p.DedupKey(msgs[0])
	require.Equal(t, "{"+name+"}:outbox-dedup:"+msgs[0].MessageID, key)
	held, err := c.Get(t.Context(), key).Result()
	require.NoError(t, err)
	require.Equal(t, entries[0].ID, held, "the dedup key holds the entry id")
	pttl, err := c.PTTL(t.Context(), key).Result()
	require.NoError(t, err)
	require.Positive(t, pttl)
	require.LessOrEqual(t, pttl, ttl)

	// Once the key expires, the id is new again.
	testsvc.Eventually(t, 5*time.Second, func() bool { return c.Exists(t.Context(), key).Val() == 0 }, "dedup key did not expire")
	requireAllNil(t, p.Publish(t.Context(), msgs[:1]), 1)
	require.Equal(t, int64(3), c.XLen(t.Context(), name).Val())
}

// A stream key that holds another type fails XADD; the dedup script leaves
// no key behind, so the message goes through once the key is fixed.
func TestWrongTypeLeavesNoDedupKey(t *testing.T) {
	t.Parallel()
	c := client(t, testsvc.RedisURL(t))
	name := stream(t, c, "")
	require.NoError(t, c.Set(t.Context(), name, "not a stream", 0).Err())
	p := newPublisher(t, c, redispub.WithDedup(time.Minute))

	m := message(name, "a", 0)
	errs := p.Publish(t.Context(), []*outbox.Message{m})
	require.True(t, outbox.IsUnavailable(errs[0]), "%v", errs[0])
	require.ErrorContains(t, errs[0], "WRONGTYPE")
	require.Zero(t, c.Exists(t.Context(), p.DedupKey(m)).Val())

	require.NoError(t, c.Del(t.Context(), name).Err())
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{m}), 1)
	require.Equal(t, int64(1), c.XLen(t.Context(), name).Val())
}

func TestHashTags(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, client(t, testsvc.RedisURL(t)), redispub.WithStreamPrefix("{shop}:"))
	m := message("orders", "a", 0)
	require.Equal(t, "{shop}:orders", p.Stream(m))
	require.Equal(t, "{shop}:orders:outbox-dedup:"+m.MessageID, p.DedupKey(m), "the stream's own tag is kept")
}

func TestConcurrentPublishAndClose(t *testing.T) {
	t.Parallel()
	c := client(t, testsvc.RedisURL(t))
	name := stream(t, c, "")
	p, err := redispub.New(c)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			msgs := []*outbox.Message{message(name, strconv.Itoa(w), 0), message(name, strconv.Itoa(w), 1)}
			for i, err := range p.Publish(t.Context(), msgs) {
				if err != nil {
					t.Errorf("worker %d message %d: %v", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(16), c.XLen(t.Context(), name).Val())
	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	errs := p.Publish(t.Context(), []*outbox.Message{message(name, "x", 0)})
	require.True(t, outbox.IsUnavailable(errs[0]))
}

func TestValidation(t *testing.T) {
	t.Parallel()
	c := client(t, testsvc.RedisURL(t))
	_, err := redispub.New(c, redispub.WithMaxLen(-1), redispub.WithDedup(time.Microsecond), redispub.WithMaxPayloadSize(0))
	require.ErrorContains(t, err, "WithMaxLen")
	require.ErrorContains(t, err, "WithDedup")
	require.ErrorContains(t, err, "WithMaxPayloadSize")

	_, err = redispub.NewClient("redis://user:s3cret@host:badport/0")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
	_, err = redispub.NewClient("http://host")
	require.Error(t, err)
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"WrongType", redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), true},
		{"OOM", redisError("OOM command not allowed when used memory > 'maxmemory'."), true},
		{"ReadOnly", redisError("READONLY You can't write against a read only replica."), true},
		{"Closed", redis.ErrClosed, true},
		{"Refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{"Syntax", redisError("ERR syntax error"), false},
		{"Deadline", context.DeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := redispub.Classify(tc.err)
			require.ErrorIs(t, err, tc.err)
			require.Equal(t, tc.unavailable, outbox.IsUnavailable(err))
			require.False(t, outbox.IsPermanent(err))
		})
	}
}

// redisError is an error reply as go-redis returns it.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}
