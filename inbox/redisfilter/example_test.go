package redisfilter_test

import (
	"context"
	"database/sql"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/redisfilter"
)

// An inbox on PostgreSQL (through a pgx pool) with the Redis pre-filter in
// front of it, and the purge of old rows running beside the consumer.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@localhost:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})

	filter, err := redisfilter.New(rdb, redisfilter.WithPrefix("shop:inbox:"))
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(db, inbox.Postgres, inbox.WithConsumer("shipping"), inbox.WithFilter(filter))
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	go func() { _ = in.RunPurge(ctx, time.Hour) }()

	_, err = in.Process(ctx, &outbox.Message{MessageID: "0190a5c2-7d1e-7c3a-9f00-2b1c4d5e6f70"},
		func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
			_, err := tx.ExecContext(ctx, "UPDATE orders SET shipped = true WHERE id = $1", m.AggregateID)
			return err
		})
	if err != nil {
		log.Fatal(err)
	}
}
