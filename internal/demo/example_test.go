package demo_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/outboxkit/outbox/internal/demo"
)

// Run with the embedded defaults (SQLite in a temporary folder, NATS
// JetStream in the process), printing progress and the table to stdout.
func ExampleRun() {
	s, err := demo.Run(context.Background(), demo.Config{}, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Printf("outbox: %d paid, %d stuck; naive: %d stuck\n", s.Outbox.Paid, s.Outbox.Stuck, s.Naive.Stuck)
}

// Run against a real PostgreSQL and NATS, with a longer outage, printing
// only the table.
func ExampleRun_servers() {
	cfg := demo.Config{
		DB:        "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		Broker:    "nats://127.0.0.1:4222",
		Orders:    5000,
		PayTime:   10 * time.Second,
		OutageFor: 5 * time.Second,
		Quiet:     true,
	}
	if _, err := demo.Run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}
