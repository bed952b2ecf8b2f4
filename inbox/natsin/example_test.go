package natsin_test

import (
	"context"
	"database/sql"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/natsin"
)

// A shipping service that consumes ORDERS with eight workers, in order per
// order id, and moves poison messages to dead.shipping.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	pool, err := pgxpool.New(ctx, "postgres://postgres@localhost:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(stdlib.OpenDBFromPool(pool), inbox.Postgres, inbox.WithConsumer("shipping"))
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable: "shipping", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}

	ship := func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO shipment (order_id) VALUES ($1)", m.AggregateID)
		return err
	}
	c, err := natsin.New(cons, in, ship, natsin.WithConcurrency(8), natsin.WithOrderedKeys(true),
		natsin.WithDeadLetter(js, "dead.shipping"))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
