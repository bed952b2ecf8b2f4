package redisin_test

import (
	"context"
	"database/sql"
	"log"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/redisin"
)

// A shipping service reading the ORDER_PAID stream in the group "shipping".
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	db, err := sql.Open("sqlite", "file:shop.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(db, inbox.SQLite, inbox.WithConsumer("shipping"))
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	ship := func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO shipment (order_id) VALUES (?)", m.AggregateID)
		return err
	}
	c, err := redisin.New(rdb, "ORDER_PAID", "shipping", in, ship, redisin.WithConcurrency(4),
		redisin.WithDeadLetterStream("shipping:dead"))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
