package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/outboxkit/outbox/inbox"
)

// A payment event moves an order from PENDING to PAID once; a second copy
// finds it already PAID, and an event for a cancelled order is refused.
func ExampleStateGuard() {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT NOT NULL)",
		"INSERT INTO orders VALUES ('order-42', 'PENDING'), ('order-43', 'CANCELLED')",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			log.Fatal(err)
		}
	}

	guard, err := inbox.NewStateGuard(inbox.SQLite, "orders", "id", "status")
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"order-42", "order-42", "order-43"} {
		// In a consumer, pass the handler's transaction instead of db.
		t, err := guard.Apply(ctx, db, id, "PAID", "PENDING")
		switch {
		case errors.Is(err, inbox.ErrUnexpectedState):
			fmt.Println(id, "refused:", err.(*inbox.StateError).Current)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println(id, t)
		}
	}
	// Output:
	// order-42 applied
	// order-42 already applied
	// order-43 refused: CANCELLED
}
