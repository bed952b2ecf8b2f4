package outboxtest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// ledger is the consumer under test: it credits an account for every
// PAYMENT_CAPTURED event. It remembers the message ids it has applied, so a
// redelivered copy changes nothing. (In production the ids go in an inbox
// table, written in the same transaction as the credit: see package inbox.)
type ledger struct {
	mu      sync.Mutex
	applied map[string]bool
	balance int // what the idempotent consumer credited
	naive   int // what a consumer without the id check would have credited
}

func (l *ledger) Handle(m *outbox.Message) {
	var p struct{ Cents int }
	if err := json.Unmarshal(m.Payload, &p); err != nil {
		panic(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.naive += p.Cents
	if l.applied[m.MessageID] {
		return // a duplicate: already applied
	}
	l.applied[m.MessageID] = true
	l.balance += p.Cents
}

// This example tests a consumer against the three moments a real relay can
// crash. The service writes three payments in one transaction; a
// CrashingStore makes the relay "crash" once at the given point; FlushAndWait
// drives the relay until everything committed is published; the recording
// Publisher hands every copy, duplicates included, to the consumer. A crash
// before publishing only delays the messages; a crash after the broker
// confirmed them, or while marking them sent, publishes the whole batch again.
// The idempotent consumer credits 60 cents each time; a naive one would
// credit the duplicates too.
func Example_crashPoints() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "outboxtest-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlitestore.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()

	for i, point := range []outboxtest.CrashPoint{
		outboxtest.CrashBeforePublish, outboxtest.CrashAfterPublish, outboxtest.CrashDuringAck,
	} {
		// A table of its own for each run, so that each starts empty.
		store, err := sqlitestore.New(db, sqlitestore.WithTable(fmt.Sprintf("outbox_%d", i)))
		if err != nil {
			panic(err)
		}
		if err := store.Migrate(ctx); err != nil {
			panic(err)
		}

		// The service's transaction: business rows (not shown) and three messages.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		w := outbox.NewWriter[*sql.Tx](store)
		for _, cents := range []int{10, 20, 30} {
			err := w.Write(ctx, tx, &outbox.Message{AggregateType: "account", AggregateID: "acc-1",
				EventType: "PAYMENT_CAPTURED", Payload: fmt.Appendf(nil, `{"cents":%d}`, cents)})
			if err != nil {
				panic(err)
			}
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}

		consumer := &ledger{applied: map[string]bool{}}
		pub := outboxtest.NewPublisher()
		pub.OnDeliver(consumer.Handle)
		crashing := outboxtest.NewCrashingStore(store, point, 1)
		relay, err := outbox.NewRelay(crashing, pub)
		if err != nil {
			panic(err)
		}
		if _, err := outboxtest.FlushAndWait(ctx, relay, crashing); err != nil {
			panic(err)
		}
		fmt.Printf("crash %-14s deliveries=%d duplicates=%d balance=%d naive=%d\n",
			point, pub.Count(), len(pub.Duplicates()), consumer.balance, consumer.naive)
	}
	// Output:
	// crash before publish deliveries=3 duplicates=0 balance=60 naive=60
	// crash after publish  deliveries=6 duplicates=3 balance=60 naive=120
	// crash during ack     deliveries=6 duplicates=3 balance=60 naive=120
}
