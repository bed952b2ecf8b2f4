package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/metrics"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/sqlitestore"
	"github.com/prometheus/client_golang/prometheus"
)

// A relay instrumented with metrics, and the HTTP endpoints the daemon serves.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-metrics-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlitestore.Open(filepath.Join(dir, "outbox.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	store, err := sqlitestore.New(db)
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}

	reg := prometheus.NewRegistry()
	m, err := metrics.NewMetrics(reg, metrics.WithRelayName("orders"))
	if err != nil {
		panic(err)
	}
	pub := outboxtest.NewPublisher() // a broker publisher in production
	relay, err := outbox.NewRelay(store, m.WrapPublisher(pub), outbox.WithHooks(m))
	if err != nil {
		panic(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	for _, id := range []string{"1", "2", "3"} {
		err := outbox.NewWriter(store).Write(ctx, tx,
			&outbox.Message{AggregateType: "order", AggregateID: id, EventType: "ORDER_PAID", Payload: []byte(`{}`)})
		if err != nil {
			panic(err)
		}
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	// The daemon runs relay.Run and m.PollStats instead.
	if _, err := outboxtest.FlushAndWait(ctx, relay, store); err != nil {
		panic(err)
	}

	srv := httptest.NewServer(metrics.NewServeMux(reg, metrics.PingCheck("store", store)))
	defer srv.Close()
	for _, path := range []string{"/metrics", "/readyz"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if path == "/readyz" || strings.HasPrefix(sc.Text(), "outbox_relay_published_total{") {
				fmt.Println(sc.Text())
			}
		}
		resp.Body.Close()
	}
	// Output:
	// outbox_relay_published_total{destination="ORDER_PAID",relay="orders",result="sent"} 3
	// ready
	// ok   store
}
