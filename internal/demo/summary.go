package demo

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxkit/outbox/internal/termsafe"
)

// Summary is what a run counted. Every order and shipment count comes from
// queries over the services' tables once every path had delivered what it was
// going to deliver; the rest are counters of the code that ran.
type Summary struct {
	// Orders is how many orders the payment service tried to pay, on each path.
	Orders int
	// Declined is how many of them were declined (the transaction rolled
	// back), the same orders on each path.
	Declined int
	// Seed is the seed the run used (Config.Seed, or the one picked for it).
	Seed int64
	// Run is the random id in the names of the run's tables and streams
	// (outbox_demo_<run>_naive_orders, OUTBOX_DEMO_<RUN>_OUTBOX, ...).
	Run string
	// DB and Broker say what ran, without credentials.
	DB, Broker string
	// OutageAt and OutageFor are when the broker went dark and for how long.
	OutageAt, OutageFor time.Duration
	// Naive is the incident's code: commit, then publish (retry once, then log).
	Naive PathResult
	// PublishFirst publishes, then commits.
	PublishFirst PathResult
	// Outbox writes the message in the order's transaction; a relay publishes.
	Outbox PathResult
	// Elapsed is the time from the first payment until every path had drained.
	Elapsed time.Duration
}

// Paths returns the three results in the table's order.
func (s *Summary) Paths() []PathResult { return []PathResult{s.Naive, s.PublishFirst, s.Outbox} }

// PathResult holds one path's counts.
type PathResult struct {
	// Name is "naive", "publish-first" or "outbox".
	Name string
	// Paid is how many orders are paid (status = 'paid').
	Paid int
	// Failed is how many payments neither committed nor were declined: the
	// customer saw an error (publish-first refuses a payment it cannot publish).
	Failed int
	// Delivered is how many shipment messages the shipping service processed:
	// its shipment rows, one per message id.
	Delivered int
	// Stuck is how many orders are paid but have no shipment.
	Stuck int
	// Ghosts is how many orders were shipped but are not paid.
	Ghosts int
	// DuplicatesSeen is how many deliveries repeated a message id the
	// shipping service had been given before; DuplicatesAbsorbed is how many
	// deliveries its inbox recognised as processed already, and skipped. They
	// differ only when a delivery failed and came again.
	DuplicatesSeen, DuplicatesAbsorbed int
	// FailedAttempts is how many publish attempts failed: the hand-written
	// code's (first tries and retries), or the relay's (per message).
	FailedAttempts int
	// Lost is how many messages the naive code gave up on after its retry.
	Lost int
	// Dead is how many outbox rows the relay marked dead (they count as stuck too).
	Dead int
	// LastShipment is when the path's last shipment was made, from the first payment.
	LastShipment time.Duration
}

// writeTable prints the side-by-side table and its legend.
func (s *Summary) writeTable(w io.Writer) error {
	num := func(f func(PathResult) int) func(PathResult) string {
		return func(p PathResult) string { return strconv.Itoa(f(p)) }
	}
	paths := s.Paths()
	rows := []struct {
		label string
		cell  func(PathResult) string
	}{
		{"", func(p PathResult) string { return p.Name }},
		{"orders paid", num(func(p PathResult) int { return p.Paid })},
		{"payments failed (customer saw an error)", num(func(p PathResult) int { return p.Failed })},
		{"shipment messages delivered", num(func(p PathResult) int { return p.Delivered })},
		{`paid but not shipped ("stuck")`, num(func(p PathResult) int { return p.Stuck })},
		{`shipped but never paid ("ghost")`, num(func(p PathResult) int { return p.Ghosts })},
		{"duplicates seen / absorbed by the inbox", func(p PathResult) string {
			return fmt.Sprintf("%d / %d", p.DuplicatesSeen, p.DuplicatesAbsorbed)
		}},
		{"failed publish attempts", num(func(p PathResult) int { return p.FailedAttempts })},
		{"last shipment at", func(p PathResult) string { return seconds(p.LastShipment) }},
	}
	width := 0
	for _, r := range rows {
		width = max(width, len(r.label))
	}
	// AlignRight suits the numbers; the labels are padded to stay on the left.
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', tabwriter.AlignRight)
	for _, r := range rows {
		fmt.Fprintf(tw, "%-*s\t", width, r.label)
		for _, p := range paths {
			fmt.Fprintf(tw, "%s\t", r.cell(p))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d orders on each path, %d declined (rolled back) on each; broker dark from %s to %s; %s in all.\n",
		s.Orders, s.Declined, seconds(s.OutageAt), seconds(s.OutageAt+s.OutageFor), seconds(s.Elapsed))
	fmt.Fprintf(&b, "  naive          commits, then publishes; retries once, then logs the error and moves on (%d lost)\n", s.Naive.Lost)
	b.WriteString("  publish-first  publishes, then commits; refuses the payment when the publish fails\n")
	b.WriteString("  outbox         writes the message in the order's transaction; the relay publishes and retries\n")
	b.WriteString("A publish that timed out may have reached the broker all the same: a retry then stores a second\n" +
		"copy, which the shipping service's inbox absorbs. The relay sends each message's id as Nats-Msg-Id,\n" +
		"so JetStream itself drops the relay's re-sends.\n")
	if s.Outbox.Dead > 0 {
		fmt.Fprintf(&b, "  %d outbox messages went dead (see the relay's log); they count as stuck.\n", s.Outbox.Dead)
	}
	fmt.Fprintf(&b, "Counts are queries over the orders and shipments tables (%s, %s; seed %d).\n", termsafe.String(s.DB), termsafe.String(s.Broker), s.Seed)
	_, err := io.WriteString(w, b.String())
	return err
}

// seconds formats d as seconds with one decimal.
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
}
