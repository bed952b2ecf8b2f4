package amqpin_test

import (
	"context"
	"database/sql"
	"log"
	"os/signal"
	"syscall"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/amqpin"
)

// A shipping service on the "shipping" queue, with dead letters published
// to the "shipping.dead" queue through the default exchange.
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
	conn, err := amqp.Dial("amqp://guest:guest@localhost:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ship := func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO shipment (order_id) VALUES (?)", m.AggregateID)
		return err
	}
	c, err := amqpin.New(conn, "shipping", in, ship, amqpin.WithConcurrency(4), amqpin.WithDeadLetter("", "shipping.dead"))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err) // amqpin.ErrDeliveriesClosed: reconnect and run again
	}
}
