package config_test

import (
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/internal/config"
)

// Parse decodes strictly, and Validate reports every problem at once, each
// naming its key.
func ExampleParse() {
	c, err := config.Parse([]byte(`
db: postgres://outbox:hunter2@db.internal:5432/shop
table: "orders; drop table orders"
broker: nats://127.0.0.1:4222
batch_size: -1
lease: 2s
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("db:", c.DB) // printed redacted
	for _, line := range strings.Split(c.Validate().Error(), "\n") {
		fmt.Println(line)
	}

	_, err = config.Parse([]byte("batch_size: lots\npoll_intervall: 1s\n"))
	fmt.Println(err)
	// Output:
	// db: postgres://outbox:REDACTED@db.internal:5432/shop
	// table: "orders; drop table orders" is not a valid table name for postgres:// (name or schema.name, each part a lower-case letter or underscore, then up to 62 lower-case letters, digits or underscores)
	// batch_size: -1 is not between 0 (sized by the relay) and 100000
	// lease: 2s is shorter than twice publish_timeout (3s)
	// line 1: batch_size: "lots" is not a whole number; line 2: unknown key "poll_intervall"
}

// A Secret prints redacted; Value gives the real string to a driver.
func ExampleSecret() {
	s := config.NewSecret("amqp://relay:hunter2@rabbit:5672/")
	fmt.Println(s)
	fmt.Printf("%v %q\n", config.NewSecret("whsec_hunter2"), s.Scheme())
	// Output:
	// amqp://relay:REDACTED@rabbit:5672/
	// REDACTED "amqp"
}
