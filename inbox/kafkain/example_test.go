package kafkain_test

import (
	"context"
	"database/sql"
	"log"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/kafkain"
)

// A shipping service in the consumer group "shipping" on the ORDER_PAID
// topic, in order per key, with a dead-letter topic.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	db, err := sql.Open("mysql", "root@tcp(localhost:3306)/shop?parseTime=true")
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(db, inbox.MySQL, inbox.WithConsumer("shipping"))
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	ship := func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO shipment (order_id) VALUES (?)", m.AggregateID)
		return err
	}
	c, err := kafkain.New(in, ship, kafkain.Params{
		Group: "shipping", Topics: []string{"ORDER_PAID"},
		ClientOpts: []kgo.Opt{kgo.SeedBrokers("localhost:9092")},
	}, kafkain.WithConcurrency(8), kafkain.WithOrderedKeys(true), kafkain.WithDeadLetterTopic("shipping.dead"))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
