package kafkapub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/kafkapub"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster starts a one-broker kfake cluster with topic (3 partitions),
// closed when t ends.
func cluster(t *testing.T, topic string, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(3, topic)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// publisher returns a Publisher on a new client to c, closed when t ends.
func publisher(t *testing.T, addrs []string, opts ...kafkapub.Option) *kafkapub.Publisher {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	p, err := kafkapub.New(cl, opts...)
	require.NoError(t, err)
	return p
}

// consume reads n records of topic from the start.
func consume(t *testing.T, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "got %d of %d records", len(out), n)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		out = append(out, fs.Records()...)
	}
	return out
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

func headers(r *kgo.Record) map[string]string {
	h := make(map[string]string, len(r.Headers))
	for _, kv := range r.Headers {
		h[kv.Key] = string(kv.Value)
	}
	return h
}

func requireAllNil(t *testing.T, errs []error, n int) {
	t.Helper()
	require.Len(t, errs, n)
	for i, err := range errs {
		require.NoError(t, err, "message %d", i)
	}
}

func TestPublishBatchArrivesIntact(t *testing.T) {
	t.Parallel()
	topic := testsvc.Name(t)
	c := cluster(t, topic)
	p := publisher(t, c.ListenAddrs())

	msgs := make([]*outbox.Message, 40)
	for i := range msgs {
		msgs[i] = message(topic, "order-"+strconv.Itoa(i%5), i/5)
	}
	msgs[0].Headers["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	msgs[0].Headers[outbox.HeaderMessageID] = "forged" // a caller's header never overrides a standard one
	msgs[1].PartitionKey = "custom-key"

	requireAllNil(t, p.Publish(t.Context(), msgs), len(msgs))

	recs := consume(t, c.ListenAddrs(), topic, len(msgs))
	require.Len(t, recs, len(msgs))
	byID := make(map[string]*kgo.Record)
	for _, r := range recs {
		byID[headers(r)[outbox.HeaderMessageID]] = r
	}
	partitionOf := make(map[string]int32)
	for _, m := range msgs {
		r, ok := byID[m.MessageID]
		require.True(t, ok, "message %s not received", m.MessageID)
		require.Equal(t, topic, r.Topic)
		require.Equal(t, m.Key(), string(r.Key))
		require.JSONEq(t, string(m.Payload), string(r.Value))
		want := m.StandardHeaders()
		want[kafkapub.HeaderContentType] = m.MediaType()
		require.Equal(t, want, headers(r))
		if prev, ok := partitionOf[m.Key()]; ok {
			require.Equal(t, prev, r.Partition, "key %s split over partitions", m.Key())
		}
		partitionOf[m.Key()] = r.Partition
	}
	h := headers(byID[msgs[0].MessageID])
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", h["traceparent"])
	require.Equal(t, msgs[0].MessageID, h[outbox.HeaderMessageID])
	require.Equal(t, "acme", h["tenant"])
	require.Equal(t, "order", h[outbox.HeaderAggregateType])
	require.Equal(t, "ORDER_PAID", h[outbox.HeaderEventType])
}

func TestPerKeyOrderAcrossBatches(t *testing.T) {
	t.Parallel()
	topic := testsvc.Name(t)
	c := cluster(t, topic)
	p := publisher(t, c.ListenAddrs())

	const keys, perKey, batches = 6, 10, 5
	seq := make(map[string]int)
	var total int
	for b := range batches {
		var msgs []*outbox.Message
		for i := range perKey * keys / batches {
			agg := "agg-" + strconv.Itoa((i+b)%keys)
			msgs = append(msgs, message(topic, agg, seq[agg]))
			seq[agg]++
		}
		requireAllNil(t, p.Publish(t.Context(), msgs), len(msgs))
		total += len(msgs)
	}

	next := make(map[string]int)
	for _, r := range consume(t, c.ListenAddrs(), topic, total) {
		var body struct {
			Order string `json:"order"`
			Seq   int    `json:"seq"`
		}
		require.NoError(t, json.Unmarshal(r.Value, &body))
		require.Equal(t, next[body.Order], body.Seq, "aggregate %s out of order", body.Order)
		next[body.Order]++
	}
	require.Equal(t, seq, next)
}

func TestTopicNaming(t *testing.T) {
	t.Parallel()
	topic := testsvc.Name(t)
	c := cluster(t, "pre."+topic, kfake.SeedTopics(1, "pre.EVT_"+topic))
	p := publisher(t, c.ListenAddrs(), kafkapub.WithTopicPrefix("pre."))

	withTopic := message(topic, "a", 0)
	byEvent := message("", "a", 1)
	byEvent.EventType = "EVT_" + topic
	require.Equal(t, "pre."+topic, p.Topic(withTopic))
	require.Equal(t, "pre.EVT_"+topic, p.Topic(byEvent))
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{withTopic, byEvent}), 2)
	require.Len(t, consume(t, c.ListenAddrs(), "pre."+topic, 1), 1)
	require.Len(t, consume(t, c.ListenAddrs(), "pre.EVT_"+topic, 1), 1)

	_, err := kafkapub.New(kgoClient(t, c), kafkapub.WithTopicPrefix("bad prefix/"))
	require.ErrorContains(t, err, "WithTopicPrefix")
	_, err = kafkapub.New(kgoClient(t, c), kafkapub.WithProbeAfter(0))
	require.ErrorContains(t, err, "WithProbeAfter")
}

func kgoClient(t *testing.T, c *kfake.Cluster) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// A record Kafka cannot take fails alone, as Permanent; its batch-mates go through.
func TestRefusedRecordFailsAlone(t *testing.T) {
	t.Parallel()
	topic := testsvc.Name(t)
	c := cluster(t, topic)
	p := publisher(t, c.ListenAddrs())

	big := message(topic, "b", 0)
	big.Payload = json.RawMessage(`"` + strings.Repeat("x", 1_100_000) + `"`)
	badTopic := message("no spaces allowed", "c", 0)
	msgs := []*outbox.Message{message(topic, "a", 0), big, badTopic, message(topic, "d", 0)}

	errs := p.Publish(t.Context(), msgs)
	require.Len(t, errs, 4)
	require.NoError(t, errs[0])
	require.True(t, outbox.IsPermanent(errs[1]), "too large: %v", errs[1])
	require.ErrorIs(t, errs[1], kerr.MessageTooLarge)
	require.True(t, outbox.IsPermanent(errs[2]), "bad topic: %v", errs[2])
	require.ErrorContains(t, errs[2], "not a valid Kafka topic name")
	require.NoError(t, errs[3])
	require.Len(t, consume(t, c.ListenAddrs(), topic, 2), 2)
}

// The cluster answers produce requests with an error code (kfake fault
// injection on the real wire protocol); each code lands in its class.
func TestClusterRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		code        *kerr.Error
		permanent   bool
		unavailable bool
	}{
		{"MessageTooLarge", kerr.MessageTooLarge, true, false},
		{"InvalidRecord", kerr.InvalidRecord, true, false},
		{"PolicyViolation", kerr.PolicyViolation, true, false},
		{"TopicAuthorizationFailed", kerr.TopicAuthorizationFailed, false, true},
		// Retriable: the client retries until the deadline, then a plain timeout.
		{"NotEnoughReplicas", kerr.NotEnoughReplicas, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic := testsvc.Name(t)
			c := cluster(t, topic)
			p := publisher(t, c.ListenAddrs())
			fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: tc.code, Count: -1})

			ctx, cancel := context.WithTimeout(t.Context(), 800*time.Millisecond)
			defer cancel()
			start := time.Now()
			errs := p.Publish(ctx, []*outbox.Message{message(topic, "a", 0), message(topic, "b", 0)})
			require.Less(t, time.Since(start), 2*time.Second, "publish outlived its deadline")
			require.Len(t, errs, 2)
			for _, err := range errs {
				require.Error(t, err)
				require.Equal(t, tc.permanent, outbox.IsPermanent(err), "permanent? %v", err)
				require.Equal(t, tc.unavailable, outbox.IsUnavailable(err), "unavailable? %v", err)
				if !tc.permanent && !tc.unavailable {
					require.ErrorIs(t, err, context.DeadlineExceeded)
				}
			}
			require.Positive(t, fault.Hits())

			fault.Remove()
			recovers(t, p, topic)
		})
	}
}

// A broker that takes produce requests and never answers them: Publish
// returns at its deadline with plain (not Unavailable: metadata still answers)
// errors, and works again once the broker answers.
func TestClusterDoesNotAnswer(t *testing.T) {
	t.Parallel()
	topic := testsvc.Name(t)
	c := cluster(t, topic)
	p := publisher(t, c.ListenAddrs(), kafkapub.WithProbeAfter(50*time.Millisecond))

	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.SleepControl(func() { <-release })
		return nil, nil, false // then let the cluster handle it
	})

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := p.Publish(ctx, []*outbox.Message{message(topic, "a", 0), message(topic, "b", 1)})
	require.Less(t, time.Since(start), 1500*time.Millisecond)
	require.Len(t, errs, 2)
	for _, err := range errs {
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, outbox.IsUnavailable(err), "metadata answered, yet: %v", err)
		require.False(t, outbox.IsPermanent(err))
	}

	once.Do(func() { close(release) })
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{message(topic, "c", 2)}), 1)
	// The held records were written after all: an at-least-once duplicate, never a loss.
	require.Len(t, consume(t, c.ListenAddrs(), topic, 3), 3)
}

// The whole cluster goes away: errors are Unavailable within the deadline;
// when it is back (same port, same data) the same Publisher works again.
func TestClusterDownAndBack(t *testing.T) {
	t.Parallel()
	topic := testsvc.Name(t)
	port := freePort(t)
	dir := t.TempDir()
	opts := []kfake.Opt{kfake.Ports(port), kfake.DataDir(dir)}
	c := cluster(t, topic, opts...)
	addrs := c.ListenAddrs()
	p := publisher(t, addrs, kafkapub.WithProbeAfter(100*time.Millisecond))
	requireAllNil(t, p.Publish(t.Context(), []*outbox.Message{message(topic, "a", 0)}), 1)

	c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := p.Publish(ctx, []*outbox.Message{message(topic, "a", 1), message(topic, "b", 0)})
	require.Less(t, time.Since(start), 1500*time.Millisecond)
	require.Len(t, errs, 2)
	for _, err := range errs {
		require.True(t, outbox.IsUnavailable(err), "want unavailable: %v", err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	require.Error(t, p.Ping(ctx))

	back := cluster(t, topic, opts...)
	require.Equal(t, addrs, back.ListenAddrs())
	recovers(t, p, topic)
	require.NoError(t, p.Ping(t.Context()))
}

func TestNothingListening(t *testing.T) {
	t.Parallel()
	p := publisher(t, []string{"127.0.0.1:" + strconv.Itoa(freePort(t))}, kafkapub.WithProbeAfter(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := p.Publish(ctx, []*outbox.Message{message("t", "a", 0)})
	require.Less(t, time.Since(start), 1500*time.Millisecond)
	require.True(t, outbox.IsUnavailable(errs[0]), "%v", errs[0])
	require.Error(t, p.Ping(ctx))
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	topic := testsvc.Name(t)
	c := cluster(t, topic)
	p := publisher(t, c.ListenAddrs())

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	errs := p.Publish(ctx, []*outbox.Message{message(topic, "a", 0), message(topic, "b", 0)})
	require.Len(t, errs, 2)
	for _, err := range errs {
		require.ErrorIs(t, err, context.Canceled)
	}
	require.Empty(t, p.Publish(t.Context(), nil))
}

func TestConcurrentPublish(t *testing.T) {
	t.Parallel()
	topic := testsvc.Name(t)
	c := cluster(t, topic)
	p := publisher(t, c.ListenAddrs())

	const workers, each = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			msgs := make([]*outbox.Message, each)
			for i := range msgs {
				msgs[i] = message(topic, fmt.Sprintf("w%d", w), i)
			}
			for i, err := range p.Publish(t.Context(), msgs) {
				if err != nil {
					t.Errorf("worker %d message %d: %v", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, consume(t, c.ListenAddrs(), topic, workers*each), workers*each)
}

func TestClassify(t *testing.T) {
	t.Parallel()
	// Errors as the client hands them to a produce promise, and their classes.
	for _, tc := range []struct {
		name                               string
		err                                error
		permanent, unavailable, unroutable bool
	}{
		{"Retriable", kerr.NotLeaderForPartition, false, false, false},
		{"Session", kerr.OutOfOrderSequenceNumber, false, false, false},
		{"UnknownTopic", kerr.UnknownTopicOrPartition, false, true, true},
		{"UnknownTopicID", kerr.UnknownTopicID, false, true, true},
		{"TopicAuthorization", kerr.TopicAuthorizationFailed, false, true, false},
		{"OtherNonRetriable", kerr.InvalidPartitions, true, false, false},
		{"ClientClosed", kgo.ErrClientClosed, false, true, false},
		{"Dial", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false, true, false},
		{"RecordTimeout", kgo.ErrRecordTimeout, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := kafkapub.Classify(tc.err)
			require.ErrorIs(t, err, tc.err)
			require.Equal(t, tc.permanent, outbox.IsPermanent(err))
			require.Equal(t, tc.unavailable, outbox.IsUnavailable(err))
			require.Equal(t, tc.unroutable, outbox.IsUnroutable(err))
		})
	}
	require.NoError(t, kafkapub.Classify(nil))
}

// recovers publishes one message at a time, each with a 1 s deadline, until
// one is confirmed: records of an earlier timed-out batch may still hold the
// partition for a moment, and fail the records queued behind them.
func recovers(t *testing.T, p *kafkapub.Publisher, topic string) {
	t.Helper()
	var last error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		last = p.Publish(ctx, []*outbox.Message{message(topic, "recover", 0)})[0]
		cancel()
		if last == nil {
			return
		}
	}
	require.NoError(t, last, "publisher did not recover within 15 s")
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
