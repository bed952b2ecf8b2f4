// Package bench measures the relay end to end on the real services: how fast
// it drains a backlog from the outbox table to the broker, and how much memory
// it holds while doing so. Run with
//
//	go test -run '^$' -bench Drain -benchtime 3x ./bench
//
// Each iteration preloads the backlog (not timed), then times the relay until
// the broker has confirmed every message. Reported: msgs/s, and peak-heap-MB
// (the Go heap in use, sampled every 10 ms while draining).
package bench

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/natspub"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// target is a database with a migrated outbox table and a way to preload it.
type target struct {
	store outbox.Store
	// newStore returns another Store on the table: each relay gets its own,
	// as each relay process has (a Store keeps where its next claim starts).
	newStore func() (outbox.Store, error)
	preload  func(b *testing.B, n int)
}

func payload(i int) []byte {
	return []byte(fmt.Sprintf(`{"order_id":%d,"amount_cents":%d,"currency":"EUR","customer":"c-%d"}`, i, 1000+i%900, i%5000))
}

func msgs(from, n int) []*outbox.Message {
	out := make([]*outbox.Message, n)
	for i := range out {
		out[i] = &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", (from+i)%10_000),
			EventType: "ORDER_PAID", Payload: payload(from + i)}
	}
	return out
}

func postgresTarget(b *testing.B) target {
	pool, _, _ := testsvc.PostgresSchema(b)
	st, err := pgstore.New(pool)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	w := outbox.NewWriter[pgx.Tx](st)
	return target{store: st, newStore: func() (outbox.Store, error) { return pgstore.New(pool) }, preload: func(b *testing.B, n int) {
		ctx := context.Background()
		for i := 0; i < n; i += 1000 {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs(i, min(1000, n-i))...) })
			if err != nil {
				b.Fatal(err)
			}
		}
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE outbox_message"); err != nil {
			b.Fatal(err)
		}
	}}
}

func sqliteTarget(b *testing.B) target {
	db, err := sqlitestore.Open(testsvc.SQLitePath(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	st, err := sqlitestore.New(db)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	w := outbox.NewWriter[*sql.Tx](st)
	return target{store: st, newStore: func() (outbox.Store, error) { return sqlitestore.New(db) }, preload: func(b *testing.B, n int) {
		ctx := context.Background()
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
	}}
}

// natsTarget is a fresh JetStream stream on the real server and a publisher to it.
func natsTarget(b *testing.B) (outbox.Publisher, func() uint64) {
	url := testsvc.NATSURL(b)
	nc, err := nats.Connect(url)
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
	count := func() uint64 {
		info, err := stream.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return info.State.Msgs
	}
	return p, count
}

// drain runs relays over the preloaded backlog until the broker holds want
// messages, and returns the time it took and the peak heap seen.
func drain(b *testing.B, newStore func() (outbox.Store, error), pub outbox.Publisher, relays int, want uint64, count func() uint64,
	opts ...outbox.RelayOption) (time.Duration, uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() { // sample the heap
		var ms runtime.MemStats
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	errs := make(chan error, relays)
	start := time.Now()
	for range relays {
		st, err := newStore()
		if err != nil {
			b.Fatal(err)
		}
		r, err := outbox.NewRelay(st, pub, opts...)
		if err != nil {
			b.Fatal(err)
		}
		go func() { errs <- r.Run(ctx) }()
	}
	for count() < want {
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	for range relays {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	close(done)
	return elapsed, peak.Load()
}

func BenchmarkDrain(b *testing.B) {
	dbs := []struct {
		name string
		new  func(*testing.B) target
	}{{"postgres", postgresTarget}, {"sqlite", sqliteTarget}}
	shapes := []struct {
		name   string
		relays int
		opts   []outbox.RelayOption
	}{
		{"defaults", 1, nil}, // sized by the relay: 10 to 1,000 rows, 1 to 4 in flight
		{"batch100_inflight1", 1, []outbox.RelayOption{outbox.WithBatchSize(100), outbox.WithMaxInFlight(1)}},
		{"batch1000", 1, []outbox.RelayOption{outbox.WithBatchSize(1000), outbox.WithMaxInFlight(1)}},
		{"batch1000_delete", 1, []outbox.RelayOption{outbox.WithBatchSize(1000), outbox.WithMaxInFlight(1), outbox.WithDeleteSent(true)}},
		{"batch1000_2relays", 2, []outbox.RelayOption{outbox.WithBatchSize(1000), outbox.WithMaxInFlight(1)}},
		{"batch1000_inflight4", 1, []outbox.RelayOption{outbox.WithBatchSize(1000), outbox.WithMaxInFlight(4)}},
		{"batch1000_inflight4_delete", 1, []outbox.RelayOption{outbox.WithBatchSize(1000), outbox.WithMaxInFlight(4),
			outbox.WithDeleteSent(true)}},
		{"batch1000_inflight4_2relays", 2, []outbox.RelayOption{outbox.WithBatchSize(1000), outbox.WithMaxInFlight(4)}},
	}
	for _, db := range dbs {
		for _, rows := range []int{10_000, 100_000} {
			for _, sh := range shapes {
				b.Run(fmt.Sprintf("%s/nats/rows=%d/%s", db.name, rows, sh.name), func(b *testing.B) {
					var total time.Duration
					var peak uint64
					for range b.N {
						b.StopTimer()
						tg := db.new(b)
						pub, count := natsTarget(b)
						tg.preload(b, rows)
						runtime.GC()
						b.StartTimer()
						d, p := drain(b, tg.newStore, pub, sh.relays, uint64(rows), count, sh.opts...)
						total += d
						peak = max(peak, p)
					}
					b.ReportMetric(float64(rows*b.N)/total.Seconds(), "msgs/s")
					b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
				})
			}
		}
	}
}
