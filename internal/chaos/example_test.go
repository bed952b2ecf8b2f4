package chaos_test

import (
	"fmt"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/chaos"
)

// Check judges a run from its history: here one message was committed and
// delivered twice (a relay was killed while it was in flight), and one
// rolled-back message was delivered anyway, which an outbox must never do.
func ExampleCheck() {
	paid := chaos.Ref{ID: "m1", Aggregate: "order-7", Seq: 1}
	cancelled := chaos.Ref{ID: "m2", Aggregate: "order-8", Seq: 1}
	rep := chaos.Check(chaos.Input{
		Produces: []chaos.Produce{
			{Messages: []chaos.Ref{paid}, Outcome: chaos.OK},
			{Messages: []chaos.Ref{cancelled}, Outcome: chaos.Fail, Deliberate: true},
		},
		Rows: []chaos.Row{{Ref: paid, Business: true, Outbox: true, Status: outbox.StatusSent, Attempts: 2}},
		Deliveries: []chaos.Delivery{
			{Ref: paid, Position: "1"},
			{Ref: cancelled, Position: "2"},
			{Ref: paid, Position: "3"},
		},
		Faults:  []chaos.Fault{{Kind: "kill9", Target: "relay-1", InFlight: []string{"m1"}}},
		Ordered: true,
	})
	fmt.Printf("committed %d, delivered %d, lost %d, duplicates %d (%d explained)\n",
		rep.Committed, rep.Delivered, rep.Lost, rep.Duplicates, rep.ExplainedDups)
	for _, v := range rep.Violations() {
		fmt.Println("violation:", v)
	}
	// Output:
	// committed 1, delivered 2, lost 0, duplicates 1 (1 explained)
	// violation: aborted = 1, want 0 (e.g. m2)
}
