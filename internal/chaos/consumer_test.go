package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/publisher/natspub"
	"github.com/outboxkit/outbox/publisher/redispub"
)

// consumer reads every copy the broker holds, in the broker's order, with a
// client of its own (not the relay's publisher), connected straight to the
// broker (not through the fault proxy the relays use).
type consumer interface {
	// caughtUp reports whether the consumer has read everything the broker holds.
	caughtUp(ctx context.Context) (bool, error)
	// deliveries returns what it read so far, in order.
	deliveries() []Delivery
	close()
}

// collector records deliveries.
type collector struct {
	mu   sync.Mutex
	list []Delivery
}

func (c *collector) add(d Delivery) {
	c.mu.Lock()
	c.list = append(c.list, d)
	c.mu.Unlock()
}

func (c *collector) deliveries() []Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Delivery(nil), c.list...)
}

// decode fills a delivery's aggregate and sequence from a payload written by
// the workload. A payload it cannot read leaves them empty: the message id
// still counts.
func decode(id, position string, payload []byte) Delivery {
	d := Delivery{Ref: Ref{ID: id}, Position: position, At: time.Now()}
	var p struct {
		Agg string `json:"agg"`
		Seq int64  `json:"seq"`
	}
	if json.Unmarshal(payload, &p) == nil {
		d.Aggregate, d.Seq = p.Agg, p.Seq
	}
	return d
}

// natsConsumer reads the relay's JetStream stream with an ordered consumer,
// which resumes after the last stream sequence it saw when the connection
// or the server comes back.
type natsConsumer struct {
	collector
	nc     *nats.Conn
	js     jetstream.JetStream
	cc     jetstream.ConsumeContext
	posMu  sync.Mutex
	maxSeq uint64
}

// newNATSConsumer creates the stream the relays will publish to (as the
// daemon does, with the daemon's defaults) and starts reading it.
func newNATSConsumer(ctx context.Context, url string) (*natsConsumer, error) {
	nc, err := nats.Connect(url, nats.Name("chaos-consumer"), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	c := &natsConsumer{nc: nc}
	fail := func(err error) (*natsConsumer, error) {
		nc.Close()
		return nil, err
	}
	if c.js, err = jetstream.New(nc); err != nil {
		return fail(err)
	}
	if err := natspub.EnsureStream(ctx, c.js, config.DefaultNATSStream, []string{config.DefaultNATSPrefix + ">"},
		config.DefaultDuplicateWindow); err != nil {
		return fail(err)
	}
	cons, err := c.js.OrderedConsumer(ctx, config.DefaultNATSStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fail(err)
	}
	c.cc, err = cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		seq := meta.Sequence.Stream
		c.add(decode(m.Headers().Get(outbox.HeaderMessageID), strconv.FormatUint(seq, 10), m.Data()))
		c.posMu.Lock()
		c.maxSeq = max(c.maxSeq, seq)
		c.posMu.Unlock()
	}, jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return fail(err)
	}
	return c, nil
}

func (c *natsConsumer) caughtUp(ctx context.Context) (bool, error) {
	s, err := c.js.Stream(ctx, config.DefaultNATSStream)
	if err != nil {
		return false, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return false, err
	}
	c.posMu.Lock()
	defer c.posMu.Unlock()
	return c.maxSeq >= info.State.LastSeq, nil
}

func (c *natsConsumer) close() {
	c.cc.Stop()
	c.nc.Close()
}

// redisConsumer reads the relay's Redis stream with XREAD from the start,
// remembering the last entry id, so that it resumes where it was after a
// connection error or a server restart.
type redisConsumer struct {
	collector
	client *redis.Client
	key    string
	cancel context.CancelFunc
	done   chan struct{}
	posMu  sync.Mutex
	last   string
}

// newRedisConsumer starts reading the stream key (the relay's stream for
// the workload's event type: no prefix, as the daemon's default).
func newRedisConsumer(url, key string) (*redisConsumer, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.MaxRetries = -1
	opt.DialTimeout = time.Second
	c := &redisConsumer{client: redis.NewClient(opt), key: key, last: "0", done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.read(ctx)
	return c, nil
}

func (c *redisConsumer) read(ctx context.Context) {
	defer close(c.done)
	for ctx.Err() == nil {
		c.posMu.Lock()
		last := c.last
		c.posMu.Unlock()
		res, err := c.client.XRead(ctx, &redis.XReadArgs{Streams: []string{c.key, last}, Count: 500,
			Block: 200 * time.Millisecond}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			select { // the server is down: try again shortly
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		for _, s := range res {
			for _, m := range s.Messages {
				id, _ := m.Values[redispub.FieldMessageID].(string)
				payload, _ := m.Values[redispub.FieldPayload].(string)
				c.add(decode(id, m.ID, []byte(payload)))
				c.posMu.Lock()
				c.last = m.ID
				c.posMu.Unlock()
			}
		}
	}
}

func (c *redisConsumer) caughtUp(ctx context.Context) (bool, error) {
	last, err := c.client.XRevRangeN(ctx, c.key, "+", "-", 1).Result()
	if err != nil {
		return false, fmt.Errorf("read last entry: %w", err)
	}
	c.posMu.Lock()
	defer c.posMu.Unlock()
	if len(last) == 0 {
		return true, nil
	}
	return c.last == last[0].ID, nil
}

func (c *redisConsumer) close() {
	c.cancel()
	<-c.done
	_ = c.client.Close()
}
