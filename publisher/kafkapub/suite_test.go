package kafkapub_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/kafkapub"
	"github.com/outboxkit/outbox/publisher/publishertest"
)

// suitePrefix is the topic prefix the suite's publishers use, to show the
// receiver maps topics back to destinations.
const suitePrefix = "outbox."

// TestSuite runs the shared publisher conformance suite over the Kafka wire
// protocol against kfake, the in-process cluster (there is no Kafka server
// on the development and CI machines).
func TestSuite(t *testing.T) {
	publishertest.Run(t, publishertest.Features{
		OrderedPerKey: true,
		Dedup:         false, // idempotence holds within one producer session only
		Headers:       true,
		ContentType:   true,
		// franz-go refuses a record whose batch would pass 1,000,012 bytes
		// (ProducerBatchMaxBytes, Kafka's default max.message.bytes).
		MaxPayload:      990_000,
		TooLargePayload: 1_100_000,
	}, publishertest.Harness{
		New: func(t *testing.T) publishertest.Dest {
			topic := testsvc.Name(t)
			c := cluster(t, suitePrefix+topic)
			return publishertest.Dest{
				Publisher: publisher(t, c.ListenAddrs(), kafkapub.WithTopicPrefix(suitePrefix)),
				Receiver:  newReceiver(t, c, suitePrefix+topic),
				Topic:     topic,
			}
		},
		Outage: func(t *testing.T) publishertest.OutageDest {
			topic := testsvc.Name(t)
			c := cluster(t, suitePrefix+topic)
			// Every connection of the publisher's client, to the seed and to
			// the brokers that metadata names, goes through the proxy.
			proxy := faultproxy.New(t, c.ListenAddrs()[0])
			var d net.Dialer
			cl, err := kgo.NewClient(kgo.SeedBrokers(proxy.Addr()),
				kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
					return d.DialContext(ctx, network, proxy.Addr())
				}))
			require.NoError(t, err)
			t.Cleanup(cl.Close)
			p, err := kafkapub.New(cl, kafkapub.WithTopicPrefix(suitePrefix))
			require.NoError(t, err)
			return publishertest.OutageDest{
				Dest:    publishertest.Dest{Publisher: p, Receiver: newReceiver(t, c, suitePrefix+topic), Topic: topic},
				Cut:     proxy.Cut,
				Restore: proxy.Restore,
				Stall:   proxy.Blackhole,
			}
		},
		Down: func(t *testing.T) outbox.Publisher {
			return publisher(t, []string{"127.0.0.1:" + strconv.Itoa(freePort(t))})
		},
	})
}

// receiver consumes one topic with its own client, straight to the cluster.
type receiver struct {
	t      *testing.T
	client *kgo.Client
	mu     sync.Mutex
	buf    []*kgo.Record
}

func newReceiver(t *testing.T, c *kfake.Cluster, topic string) *receiver {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return &receiver{t: t, client: cl}
}

func (r *receiver) Receive(ctx context.Context, n int) ([]publishertest.Received, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	for len(r.buf) < n {
		fs := r.client.PollFetches(ctx)
		if err = ctx.Err(); err != nil {
			break
		}
		fs.EachError(func(topic string, p int32, ferr error) { r.t.Errorf("fetch %s/%d: %v", topic, p, ferr) })
		r.buf = append(r.buf, fs.Records()...)
	}
	k := min(n, len(r.buf))
	out := make([]publishertest.Received, k)
	for i, rec := range r.buf[:k] {
		h := headers(rec)
		out[i] = publishertest.Received{
			MessageID:   h[outbox.HeaderMessageID],
			Key:         string(rec.Key),
			Topic:       strings.TrimPrefix(rec.Topic, suitePrefix),
			Headers:     h,
			Payload:     rec.Value,
			ContentType: h[kafkapub.HeaderContentType],
		}
	}
	r.buf = r.buf[k:]
	return out, err
}
