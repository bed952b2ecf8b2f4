package kafkain_test

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/internal/consume"
	"github.com/outboxkit/outbox/inbox/internal/consumetest"
	"github.com/outboxkit/outbox/inbox/kafkain"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/kafkapub"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConsumer(t *testing.T) {
	t.Parallel()
	consumetest.Run(t, func(t *testing.T) consumetest.Broker { return newBroker(t) })
}

// broker is an in-process Kafka cluster (kfake) with a three-partition topic,
// a dead-letter topic, and one consumer group.
type broker struct {
	seeds              []string
	cl                 *kgo.Client // producer and admin
	adm                *kadm.Client
	pub                *kafkapub.Publisher
	topic, dead, group string
}

func newBroker(t *testing.T) *broker {
	name := testsvc.Name(t)
	b := &broker{topic: name, dead: name + "_dead", group: "shipping"}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, b.topic, b.dead))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	b.seeds = c.ListenAddrs()
	b.cl, err = kgo.NewClient(kgo.SeedBrokers(b.seeds...))
	require.NoError(t, err)
	t.Cleanup(b.cl.Close)
	b.adm = kadm.NewClient(b.cl)
	b.pub, err = kafkapub.New(b.cl)
	require.NoError(t, err)
	return b
}

func (b *broker) Publish(t *testing.T, msgs ...*outbox.Message) {
	for _, m := range msgs {
		m.Topic = b.topic
	}
	for i, err := range b.pub.Publish(context.Background(), msgs) {
		require.NoError(t, err, "publish %s", msgs[i].MessageID)
	}
}

func (b *broker) Consumer(t *testing.T, in *inbox.Inbox, h inbox.Handler, s consumetest.Settings) consumetest.Runner {
	opts := []kafkain.Option{kafkain.WithConcurrency(s.Concurrency), kafkain.WithOrderedKeys(s.Ordered),
		kafkain.WithMaxAttempts(s.MaxAttempts), kafkain.WithRetryBackoff(s.RetryBase, 10*s.RetryBase),
		kafkain.WithHooks(s.Hooks...)}
	if s.DeadLetter {
		opts = append(opts, kafkain.WithDeadLetterTopic(b.dead))
	}
	c, err := kafkain.New(in, h, kafkain.Params{Group: b.group, Topics: []string{b.topic},
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(b.seeds...), kgo.FetchMaxWait(200 * time.Millisecond)}}, opts...)
	require.NoError(t, err)
	return c
}

func (b *broker) DeadLetters(t *testing.T) []*outbox.Message {
	ctx := context.Background()
	ends, err := b.adm.ListEndOffsets(ctx, b.dead)
	require.NoError(t, err)
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	if want == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.seeds...), kgo.ConsumeTopics(b.dead),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var out []*outbox.Message
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for int64(len(out)) < want {
		fs := cl.PollFetches(pctx)
		require.NoError(t, pctx.Err(), "reading the dead-letter topic")
		fs.EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			out = append(out, consume.MessageFromHeaders(h, r.Value))
		})
	}
	return out
}

// Drained: the group's committed offset is the end of every partition.
func (b *broker) Drained(t *testing.T) bool {
	ctx := context.Background()
	ends, err := b.adm.ListEndOffsets(ctx, b.topic)
	require.NoError(t, err)
	committed, err := b.adm.FetchOffsets(ctx, b.group)
	require.NoError(t, err)
	drained := true
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset == 0 {
			return
		}
		c, ok := committed.Lookup(o.Topic, o.Partition)
		if !ok || c.At != o.Offset {
			drained = false
		}
	})
	return drained
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", ":memory:")
	require.NoError(t, err)
	defer db.Close()
	in, err := inbox.New(db, inbox.SQLite)
	require.NoError(t, err)
	noop := func(context.Context, *sql.Tx, *outbox.Message) error { return nil }
	good := kafkain.Params{Group: "g", Topics: []string{"t"}}
	for _, tc := range []struct {
		name    string
		p       kafkain.Params
		opt     kafkain.Option
		wantErr string
	}{
		{"Defaults", good, kafkain.WithLogger(slog.New(slog.DiscardHandler)), ""},
		{"NoGroup", kafkain.Params{Topics: []string{"t"}}, kafkain.WithConcurrency(1), "Params.Group"},
		{"NoTopics", kafkain.Params{Group: "g"}, kafkain.WithConcurrency(1), "Params.Topics"},
		{"EmptyTopic", kafkain.Params{Group: "g", Topics: []string{""}}, kafkain.WithConcurrency(1), "Params.Topics"},
		{"Concurrency", good, kafkain.WithConcurrency(0), "WithConcurrency"},
		{"MaxAttempts", good, kafkain.WithMaxAttempts(0), "WithMaxAttempts"},
		{"Backoff", good, kafkain.WithRetryBackoff(0, 0), "WithRetryBackoff"},
		{"MaxPoll", good, kafkain.WithMaxPollRecords(0), "WithMaxPollRecords"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kafkain.New(in, noop, tc.p, tc.opt)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
