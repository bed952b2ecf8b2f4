package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/redisfilter"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// BenchmarkProcess measures one Process call on each database, without and
// with the Redis pre-filter, for a new message (the handler inserts a row)
// and for a duplicate (the handler never runs). Run it with a fixed count,
// e.g. go test -run '^$' -bench Process -benchtime 2000x ./inbox.
func BenchmarkProcess(b *testing.B) {
	for _, d := range dialects {
		for _, withRedis := range []bool{false, true} {
			name := string(d) + "/NoFilter"
			if withRedis {
				name = string(d) + "/Redis"
			}
			b.Run(name, func(b *testing.B) {
				tdb := newTestDB(b, d)
				opts := []inbox.Option{inbox.WithConsumer("bench")}
				if withRedis {
					rdb := redisClient(b, "")
					prefix := "inbox_bench:" + testsvc.Name(b) + ":"
					b.Cleanup(func() { deleteKeys(b, rdb, prefix) })
					f, err := redisfilter.New(rdb, redisfilter.WithPrefix(prefix))
					if err != nil {
						b.Fatal(err)
					}
					opts = append(opts, inbox.WithFilter(f))
				}
				in := newInbox(b, tdb.db, d, opts...)
				h := tdb.effectHandler(0)
				ctx := context.Background()

				b.Run("New", func(b *testing.B) {
					i := 0
					for b.Loop() {
						i++
						if _, err := in.Process(ctx, message(fmt.Sprintf("new-%d", i)), h); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run("Duplicate", func(b *testing.B) {
					msg := message("dup")
					if _, err := in.Process(ctx, msg, h); err != nil {
						b.Fatal(err)
					}
					for b.Loop() {
						out, err := in.Process(ctx, msg, h)
						if err != nil || out != inbox.Duplicate {
							b.Fatalf("got %v, %v", out, err)
						}
					}
				})
			})
		}
	}
}
