package ordering_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/natspub"
)

// countingPublisher confirms everything at once and counts it: the broker
// costs nothing, so the benchmark sees the database side of ordering alone.
type countingPublisher struct{ n atomic.Int64 }

func (p *countingPublisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	p.n.Add(int64(len(msgs)))
	return make([]error, len(msgs))
}

// natsCounter is a JetStream stream of the benchmark's own and a publisher to it.
func natsCounter(b *testing.B) (outbox.Publisher, func() int64) {
	nc, err := nats.Connect(testsvc.NATSURL(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	name := strings.ToUpper(testsvc.Name(b))
	ctx := context.Background()
	if err := natspub.EnsureStream(ctx, js, name, []string{name + ".>"}, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	p, err := natspub.New(js, natspub.WithSubjectPrefix(name+"."))
	if err != nil {
		b.Fatal(err)
	}
	stream, err := js.Stream(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	return p, func() int64 {
		info, err := stream.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return int64(info.State.Msgs)
	}
}

// BenchmarkOrdering drains a backlog of rows spread over many aggregates with
// two relays, ordering off and on, and reports msgs/s; the ratio of the two is
// the cost of ordering. aggs is how many aggregates the backlog spreads over
// (written round-robin, as concurrent business transactions would); with few
// aggregates ordering can move at most one message per aggregate per cycle.
// The publisher is an in-memory counter (the database side alone) or NATS
// JetStream on the local server.
//
//	go test -run '^$' -bench Ordering -benchtime 1x -count 3 ./e2e/ordering
func BenchmarkOrdering(b *testing.B) {
	const rows = 50_000
	type shape struct {
		broker string
		aggs   int
		delete bool
	}
	shapes := []shape{
		{"memory", 10_000, false}, {"memory", 10_000, true},
		{"memory", 1_000, false}, {"memory", 100, false},
		{"nats", 10_000, false},
	}
	for _, sh := range shapes {
		for _, db := range backends {
			for _, ordered := range []bool{false, true} {
				mode := map[bool]string{false: "keep", true: "delete"}[sh.delete]
				name := fmt.Sprintf("%s/%s/aggs=%d/%s/ordered=%v", db.name, sh.broker, sh.aggs, mode, ordered)
				b.Run(name, func(b *testing.B) {
					var total time.Duration
					for range b.N {
						b.StopTimer()
						be := db.new(b)
						be.writeAll(b, interleaved(sh.aggs, rows), 1000)
						if db.name == "postgres" {
							if err := be.exec(context.Background(), "VACUUM ANALYZE outbox_message"); err != nil {
								b.Fatal(err)
							}
						}
						var pub outbox.Publisher
						var count func() int64
						if sh.broker == "nats" {
							pub, count = natsCounter(b)
						} else {
							cp := &countingPublisher{}
							pub, count = cp, cp.n.Load
						}
						b.StartTimer()
						start := time.Now()
						stop := relays(b, be, 2, pub, outbox.WithOrdering(ordered, outbox.DeadBlocks),
							outbox.WithDeleteSent(sh.delete))
						for count() < rows {
							time.Sleep(2 * time.Millisecond)
						}
						total += time.Since(start)
						b.StopTimer()
						stop()
					}
					b.ReportMetric(float64(rows*b.N)/total.Seconds(), "msgs/s")
				})
			}
		}
	}
}

// BenchmarkClaimAck measures the database side alone, without relays or a
// broker: one loop claims 100 rows and acknowledges them (keeping them as
// sent) until a backlog of 20,000 rows is drained, ordering off and on. It
// reports rows/s; the ratio is what ordering costs the database.
//
//	go test -run '^$' -bench ClaimAck -benchtime 1x -count 5 ./e2e/ordering
func BenchmarkClaimAck(b *testing.B) {
	const rows, batch = 20_000, 100
	for _, aggs := range []int{10_000, 1_000, 100} {
		for _, db := range backends {
			for _, ordered := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/aggs=%d/ordered=%v", db.name, aggs, ordered), func(b *testing.B) {
					ctx := context.Background()
					var total time.Duration
					for range b.N {
						b.StopTimer()
						be := db.new(b)
						be.writeAll(b, interleaved(aggs, rows), 1000)
						if db.name == "postgres" {
							if err := be.exec(ctx, "VACUUM ANALYZE outbox_message"); err != nil {
								b.Fatal(err)
							}
						}
						st := be.newStore(b)
						b.StartTimer()
						start := time.Now()
						for done := 0; done < rows; {
							c, err := st.Claim(ctx, outbox.ClaimParams{Limit: batch, Lease: time.Minute, Ordered: ordered, BlockOnDead: true})
							if err != nil {
								b.Fatal(err)
							}
							if len(c.Messages) == 0 {
								b.Fatalf("claimed nothing with %d of %d done", done, rows)
							}
							n, err := st.Ack(ctx, outbox.AckParams{Messages: c.Messages})
							if err != nil || n != len(c.Messages) {
								b.Fatalf("ack: %d of %d, %v", n, len(c.Messages), err)
							}
							done += n
						}
						total += time.Since(start)
						b.StopTimer()
					}
					b.ReportMetric(float64(rows*b.N)/total.Seconds(), "rows/s")
				})
			}
		}
	}
}

// BenchmarkHotAggregate drains a backlog of 300 messages of one aggregate
// with two relays, ordering on, and reports msgs/s: the per-aggregate cap of
// one message per claim, publish and acknowledge cycle, with an in-memory
// publisher and the relays polling every 10 ms.
//
//	go test -run '^$' -bench HotAggregate -benchtime 1x -count 3 ./e2e/ordering
func BenchmarkHotAggregate(b *testing.B) {
	const rows = 300
	for _, db := range backends {
		b.Run(db.name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				be := db.new(b)
				be.writeAll(b, interleaved(1, rows), 100)
				cp := &countingPublisher{}
				b.StartTimer()
				start := time.Now()
				stop := relays(b, be, 2, cp, outbox.WithOrdering(true, outbox.DeadBlocks))
				for cp.n.Load() < rows {
					time.Sleep(time.Millisecond)
				}
				total += time.Since(start)
				b.StopTimer()
				stop()
			}
			b.ReportMetric(float64(rows*b.N)/total.Seconds(), "msgs/s")
		})
	}
}
