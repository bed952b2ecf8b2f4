package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/amqppub"
	"github.com/outboxkit/outbox/publisher/kafkapub"
	"github.com/outboxkit/outbox/publisher/mqttpub"
	"github.com/outboxkit/outbox/publisher/redispub"
	"github.com/outboxkit/outbox/publisher/webhookpub"
	"github.com/outboxkit/outbox/store/mysqlstore"
)

// matrixEvent is the event type of every message the matrix writes (msgs), so
// each broker target has one topic, stream or queue to count.
const matrixEvent = "ORDER_PAID"

// sink is a broker ready for one drain: a publisher to it, and stored, which
// counts what the broker holds (or, for a webhook, what the endpoint accepted).
type sink struct {
	pub    outbox.Publisher
	stored func() (uint64, error)
}

// confirmed counts the messages a publisher reported confirmed (nil
// result), so that a drain can stop the clock the moment the last one is.
type confirmed struct {
	outbox.Publisher
	n atomic.Uint64
}

func (c *confirmed) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	errs := c.Publisher.Publish(ctx, msgs)
	var ok uint64
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	c.n.Add(ok)
	return errs
}

// matrixRows is the backlog each cell drains: 100,000, or OUTBOX_BENCH_ROWS.
func matrixRows(b *testing.B) int {
	v := os.Getenv("OUTBOX_BENCH_ROWS")
	if v == "" {
		return 100_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("OUTBOX_BENCH_ROWS=%q is not a positive number", v)
	}
	return n
}

// BenchmarkDrainMatrix drains a backlog (100,000 rows; OUTBOX_BENCH_ROWS
// overrides) from each database into each broker that runs here, with one
// relay, batches of 1,000 with up to 4 at the broker at once (the settings
// `outbox bench` uses), a publish timeout of 10 s (a batch of 1,000 needs
// more than the default 3 s on a slow broker or a busy machine, and a batch
// that times out is sent again) and sent rows kept (status 1). The clock
// runs from the relay's start until the publisher has confirmed the last
// message. Afterwards, untimed, the broker's own count must cover every
// message and no row may be left pending or dead; dup-msgs reports what the
// broker holds beyond one copy each (re-sends after a timeout, on brokers
// that do not deduplicate). Kafka is franz-go's in-process kfake cluster, so
// it shares the benchmark's CPU. Run with
//
//	go test -run '^$' -bench DrainMatrix -benchtime 1x -timeout 60m ./bench
//
// and pick cells with a pattern: -bench 'DrainMatrix/mysql/'.
func BenchmarkDrainMatrix(b *testing.B) {
	dbs := []struct {
		name string
		new  func(*testing.B) target
	}{{"postgres", postgresTarget}, {"mysql", mysqlTarget}, {"sqlite", sqliteTarget}}
	brokers := []struct {
		name string
		new  func(*testing.B) sink
	}{
		{"nats", natsSink},
		{"kafka", kafkaSink},
		{"rabbitmq", rabbitSink},
		{"redis", redisSink},
		{"webhook", webhookSink},
		{"mqtt", mqttSink},
	}
	rows := matrixRows(b)
	opts := []outbox.RelayOption{outbox.WithBatchSize(1000), outbox.WithMaxInFlight(4),
		outbox.WithPublishTimeout(10 * time.Second)}
	for _, db := range dbs {
		for _, br := range brokers {
			b.Run(fmt.Sprintf("%s/%s/rows=%d", db.name, br.name, rows), func(b *testing.B) {
				var total time.Duration
				var peak, dups uint64
				for range b.N {
					b.StopTimer()
					tg := db.new(b)
					s := br.new(b)
					tg.preload(b, rows)
					pub := &confirmed{Publisher: s.pub}
					runtime.GC()
					b.StartTimer()
					d, p := drain(b, tg.newStore, pub, 1, uint64(rows), pub.n.Load, opts...)
					b.StopTimer()
					total += d
					peak = max(peak, p)
					dups += checkDrained(b, tg.store, s, rows)
				}
				b.ReportMetric(float64(rows*b.N)/total.Seconds(), "msgs/s")
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
				b.ReportMetric(float64(dups)/float64(b.N), "dup-msgs")
			})
		}
	}
}

// checkDrained fails b unless the broker holds every message (waiting a
// little for consumers that count as messages arrive) and no row is pending
// or dead. It returns how many messages the broker holds beyond rows.
func checkDrained(b *testing.B, st outbox.Store, s sink, rows int) uint64 {
	b.Helper()
	var got uint64
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err = s.stored()
		if err == nil && got >= uint64(rows) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		b.Fatalf("count at the broker: %v", err)
	}
	if got < uint64(rows) {
		b.Fatalf("the broker holds %d messages, want %d", got, rows)
	}
	stats, err := st.Stats(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if stats.Pending != 0 || stats.Dead != 0 {
		b.Fatalf("after the drain: %d rows pending, %d dead", stats.Pending, stats.Dead)
	}
	return got - uint64(rows)
}

// mysqlTarget is a database of its own on the MariaDB/MySQL server.
func mysqlTarget(b *testing.B) target {
	_, dsn := testsvc.MySQLDatabase(b)
	db, err := mysqlstore.Open(dsn)
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	b.Cleanup(func() { db.Close() })
	st, err := mysqlstore.New(db)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	w := outbox.NewWriter[*sql.Tx](st)
	return target{store: st, newStore: func() (outbox.Store, error) { return mysqlstore.New(db) }, preload: func(b *testing.B, n int) {
		for i := 0; i < n; i += 1000 {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := w.Write(ctx, tx, msgs(i, min(1000, n-i))...); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := db.ExecContext(ctx, "ANALYZE TABLE outbox_message"); err != nil {
			b.Fatal(err)
		}
	}}
}

// natsSink is a JetStream stream of its own on the real server.
func natsSink(b *testing.B) sink {
	pub, count := natsTarget(b)
	return sink{pub: pub, stored: func() (uint64, error) { return count(), nil }}
}

// kafkaSink is a topic of three partitions on an in-process kfake cluster.
func kafkaSink(b *testing.B) sink {
	topic := testsvc.Name(b) + "." + matrixEvent
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	pub, err := kafkapub.New(cl, kafkapub.WithTopicPrefix(strings.TrimSuffix(topic, matrixEvent)))
	if err != nil {
		b.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	return sink{pub: pub, stored: func() (uint64, error) {
		ends, err := adm.ListEndOffsets(context.Background(), topic)
		if err != nil {
			return 0, err
		}
		if err := ends.Error(); err != nil {
			return 0, err
		}
		var n uint64
		ends.Each(func(o kadm.ListedOffset) { n += uint64(o.Offset) })
		return n, nil
	}}
}

// rabbitSink is a durable queue of its own on the real RabbitMQ, which the
// default exchange routes <name>.ORDER_PAID to; messages are persistent and
// confirmed.
func rabbitSink(b *testing.B) sink {
	url := testsvc.AMQPURL(b)
	prefix := testsvc.Name(b) + "."
	queue := prefix + matrixEvent
	conn, err := amqp.Dial(url)
	if err != nil {
		testsvc.Unavailable(b, "RabbitMQ", err)
	}
	b.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	pub, err := amqppub.Dial(url, amqppub.WithRoutingKeyPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pub.Close() })
	return sink{pub: pub, stored: func() (uint64, error) {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return uint64(q.Messages), err
	}}
}

// redisSink is a stream of its own on the real Redis.
func redisSink(b *testing.B) sink {
	client, err := redispub.NewClient(testsvc.RedisURL(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	prefix := testsvc.Name(b) + ":"
	pub, err := redispub.New(client, redispub.WithStreamPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pub.Close() })
	stream := prefix + matrixEvent
	b.Cleanup(func() { client.Del(context.Background(), stream) })
	return sink{pub: pub, stored: func() (uint64, error) {
		n, err := client.XLen(context.Background(), stream).Result()
		return uint64(n), err
	}}
}

// webhookSink is a local HTTP endpoint that reads each request and answers
// 200, and a publisher that POSTs one message per request (the default) with
// 16 requests in flight, over a client that keeps 16 connections open (Go's
// default transport keeps 2 idle connections per host, so most requests
// would open a new one).
func webhookSink(b *testing.B) sink {
	var n atomic.Uint64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n.Add(1)
	}))
	b.Cleanup(srv.Close)
	const inFlight = 16
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = inFlight
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	pub, err := webhookpub.New(srv.URL+"/outbox/"+webhookpub.DestinationPlaceholder,
		webhookpub.WithConcurrency(inFlight), webhookpub.WithHTTPClient(client))
	if err != nil {
		b.Fatal(err)
	}
	return sink{pub: pub, stored: func() (uint64, error) { return n.Load(), nil }}
}

// mqttSink is a topic of its own on the real Mosquitto, published at QoS 1
// and counted by a subscriber of its own.
func mqttSink(b *testing.B) sink {
	url := testsvc.MQTTURL(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := testsvc.Name(b) + "/"
	var n atomic.Uint64
	sub, err := mqttpub.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sub.Disconnect(250) })
	tok := sub.Subscribe(prefix+matrixEvent, 0, func(mqtt.Client, mqtt.Message) { n.Add(1) })
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatalf("subscribe: %v", tok.Error())
	}
	client, err := mqttpub.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Disconnect(250) })
	pub, err := mqttpub.New(client, mqttpub.WithTopicPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pub.Close() })
	return sink{pub: pub, stored: func() (uint64, error) { return n.Load(), nil }}
}
