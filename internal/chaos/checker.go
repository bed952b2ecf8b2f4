package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
)

// Outcome is how a producer saw its transaction end.
type Outcome string

// The outcomes of a [Produce], after Jepsen's ok / fail / info.
const (
	// OK: COMMIT returned success.
	OK Outcome = "ok"
	// Fail: the transaction was rolled back, on purpose or after an error
	// before COMMIT was sent, so none of its rows may ever be seen.
	Fail Outcome = "fail"
	// Info: COMMIT was sent but its reply was lost (connection cut, server
	// killed, timeout); the database says what happened.
	Info Outcome = "info"
)

// Ref names one message a producer wrote: its id, its aggregate and its
// place in the aggregate's sequence (1, 2, 3, ... in commit order).
type Ref struct {
	ID        string `json:"id"`
	Aggregate string `json:"aggregate"`
	Seq       int64  `json:"seq"`
}

// Produce is one producer transaction: the messages it wrote and how it ended.
type Produce struct {
	Messages []Ref   `json:"messages"`
	Outcome  Outcome `json:"outcome"`
	// Deliberate marks a rollback the workload chose (as opposed to one
	// forced by an error).
	Deliberate bool      `json:"deliberate,omitempty"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
}

// Row is what the database holds for one message after the run: the ground
// truth. A message committed iff its business row is present.
type Row struct {
	Ref
	// Business says the business row (written in the same transaction as
	// the outbox row) is present.
	Business bool `json:"business"`
	// Outbox says the outbox row is present.
	Outbox bool `json:"outbox"`
	// Status is the outbox row's status (pending, sent, dead).
	Status outbox.Status `json:"status"`
	// Attempts is the outbox row's retry_count: how many claims counted.
	Attempts int `json:"attempts"`
}

// Delivery is one copy of a message that the consumer read from the
// broker. The checker takes deliveries in the broker's order (stream
// position), which is the order the consumer read them in.
type Delivery struct {
	Ref
	// Position is the copy's place in the broker (stream sequence, entry
	// id); two deliveries with the same Position are one copy read twice.
	Position string    `json:"position"`
	At       time.Time `json:"at"`
}

// Fault is one injected fault and what was in flight when it struck: the
// messages a relay had claimed but not yet acknowledged, sampled from the
// database just before and just after the fault (and again at its heal),
// which are the only messages the fault can make a relay send twice.
type Fault struct {
	Kind     string    `json:"kind"`
	Target   string    `json:"target"`
	At       time.Time `json:"at"`
	Healed   time.Time `json:"healed"`
	InFlight []string  `json:"in_flight,omitempty"`
}

// Input is everything the checker needs about one run.
type Input struct {
	Produces   []Produce
	Rows       []Row
	Deliveries []Delivery
	Faults     []Fault
	// Ordered says the relays ran with per-aggregate ordering, so order
	// violations count against the run.
	Ordered bool
	// LogOnly says the writer deleted each outbox row in its own
	// transaction (outbox.WithDeleteAfterInsert, a CDC relay reading the
	// log): a business row without its outbox row is then not torn.
	LogOnly bool
}

// Report is the checker's verdict on one run. Counts are of messages
// unless the field says copies. Zero is the only passing value of every
// field marked "must be 0"; [Report.Violations] lists the ones that are not.
// A Report is a plain value that marshals to JSON; it is not safe for
// concurrent modification.
type Report struct {
	Scenario string `json:"scenario"`
	DB       string `json:"db"`
	Broker   string `json:"broker"`
	Fault    string `json:"fault"`
	Ordered  bool   `json:"ordered"`
	Seed     uint64 `json:"seed"`
	// LoadSeconds is how long producers ran under the nemesis;
	// RecoverySeconds is from the end of the load (every fault healed, the
	// producers stopped) to the last delivery, -1 when the drain gave up.
	LoadSeconds     float64 `json:"load_seconds"`
	RecoverySeconds float64 `json:"recovery_seconds"`

	Transactions  int `json:"transactions"`  // producer transactions attempted
	Attempted     int `json:"attempted"`     // messages producers tried to write
	Committed     int `json:"committed"`     // messages whose business row is in the database
	RolledBack    int `json:"rolled_back"`   // attempted, not committed
	Deliberate    int `json:"deliberate"`    // of RolledBack: rolled back on purpose
	Indeterminate int `json:"indeterminate"` // COMMIT outcome unknown to the producer
	Recovered     int `json:"recovered"`     // of Indeterminate: committed after all

	Delivered  int `json:"delivered"`  // distinct messages the consumer read
	Deliveries int `json:"deliveries"` // copies the broker held

	Lost            int `json:"lost"`              // committed, never delivered: must be 0
	Unexpected      int `json:"unexpected"`        // delivered, never written: must be 0
	Aborted         int `json:"aborted"`           // delivered, rolled back: must be 0
	AckedCommitLost int `json:"acked_commit_lost"` // COMMIT said ok, no business row: must be 0
	Torn            int `json:"torn"`              // business row without outbox row or the reverse: must be 0

	Duplicates      int `json:"duplicates"`       // extra copies: Deliveries - Delivered
	ExplainedDups   int `json:"explained_dups"`   // extra copies of messages in flight at a fault or taken over
	TakeoverDups    int `json:"takeover_dups"`    // of ExplainedDups: explained only by a lease takeover
	UnexplainedDups int `json:"unexplained_dups"` // extra copies of anything else: must be 0
	// DupBound is the most duplicates the faults and takeovers allow: the
	// in-flight sets' sizes plus the re-claims (attempts - 1) of messages
	// outside them. Duplicates must not exceed it.
	DupBound int `json:"dup_bound"`

	OrderViolations int `json:"order_violations"` // first deliveries out of sequence: must be 0 when Ordered
	RawReorders     int `json:"raw_reorders"`     // a copy of seq n read after a later seq of its aggregate (a stale duplicate)
	Gaps            int `json:"gaps"`             // committed sequences of an aggregate not 1..k: must be 0

	Dead    int `json:"dead"`    // outbox rows marked dead: must be 0
	Pending int `json:"pending"` // outbox rows still pending after the drain: must be 0

	Faults int `json:"faults"` // faults injected

	// Extra holds scenario-specific counters (relay restarts, fenced acks
	// logged, commits served while the pool was exhausted, ...).
	Extra map[string]int64 `json:"extra,omitempty"`
	// Checks holds scenario-specific pass conditions that failed.
	Checks []string `json:"checks,omitempty"`
	// Examples holds up to five message ids per violated class, to start
	// the investigation from.
	Examples map[string][]string `json:"examples,omitempty"`
}

// maxExamples is how many ids a report keeps per class.
const maxExamples = 5

// Check classifies every message of a run. It implements Jepsen's
// total-queue classes (lost, unexpected, duplicated, recovered) plus what an
// outbox needs on top: aborted reads (a rolled-back message delivered),
// commits the database forgot, torn transactions, duplicates explained by
// the faults' in-flight sets or by lease takeovers (a row claimed more than
// once), and per-aggregate order of first deliveries.
// The database rows are the ground truth; the producers' outcomes are only
// compared with it. Check only reads in, and is safe for concurrent use.
func Check(in Input) *Report {
	c := &checker{in: in, r: &Report{Ordered: in.Ordered, Faults: len(in.Faults), Transactions: len(in.Produces)}}
	c.producers()
	c.rows()
	c.outcomes()
	c.broker()
	c.deliveries()
	c.duplicates()
	c.gaps()
	c.ordering()
	return c.r
}

// checker is the state of one [Check]: the report it fills and what the
// earlier steps learned about each message, keyed by message id.
type checker struct {
	in Input
	r  *Report
	// outcome and deliberate are what producers tried, and how they think
	// it ended.
	outcome    map[string]Outcome
	deliberate map[string]bool
	// committed holds the messages whose business row is present.
	committed map[string]Ref
	// copies counts the broker's copies of each message; order holds
	// those copies in the broker's order, one per position.
	copies map[string]int
	order  []Delivery
}

// example keeps id as an example of class, up to maxExamples per class.
func (c *checker) example(class, id string) {
	r := c.r
	if r.Examples == nil {
		r.Examples = map[string][]string{}
	}
	if len(r.Examples[class]) < maxExamples {
		r.Examples[class] = append(r.Examples[class], id)
	}
}

// producers records what producers tried, and how they think it ended.
func (c *checker) producers() {
	c.outcome = map[string]Outcome{}
	c.deliberate = map[string]bool{}
	for _, p := range c.in.Produces {
		for _, m := range p.Messages {
			c.outcome[m.ID] = p.Outcome
			c.deliberate[m.ID] = p.Deliberate
		}
	}
	c.r.Attempted = len(c.outcome)
}

// rows records what the database holds: committed messages, torn
// transactions, and dead or pending outbox rows.
func (c *checker) rows() {
	r := c.r
	c.committed = map[string]Ref{}
	for _, row := range c.in.Rows {
		if row.Business != row.Outbox && !(c.in.LogOnly && row.Business) {
			r.Torn++
			c.example("torn", row.ID)
		}
		if row.Business {
			c.committed[row.ID] = row.Ref
		}
		if row.Outbox {
			switch row.Status {
			case outbox.StatusDead:
				r.Dead++
				c.example("dead", row.ID)
			case outbox.StatusPending:
				r.Pending++
				c.example("pending", row.ID)
			}
		}
	}
	r.Committed = len(c.committed)
}

// outcomes compares each producer's outcome with the database: rolled
// back, indeterminate and recovered, and commits the database forgot.
func (c *checker) outcomes() {
	r := c.r
	for _, id := range sortedKeys(c.outcome) {
		o := c.outcome[id]
		_, ok := c.committed[id]
		if !ok {
			r.RolledBack++
			if c.deliberate[id] {
				r.Deliberate++
			}
		}
		switch {
		case o == Info:
			r.Indeterminate++
			if ok {
				r.Recovered++
			}
		case o == OK && !ok:
			r.AckedCommitLost++
			c.example("acked_commit_lost", id)
		}
	}
}

// broker records what the broker held, one copy per position.
func (c *checker) broker() {
	seenPos := map[string]bool{}
	c.copies = map[string]int{}
	for _, d := range c.in.Deliveries {
		if d.Position != "" {
			if seenPos[d.Position] {
				continue // the consumer read one copy twice: not the broker's doing
			}
			seenPos[d.Position] = true
		}
		c.copies[d.ID]++
		c.order = append(c.order, d)
	}
	c.r.Deliveries = len(c.order)
	c.r.Delivered = len(c.copies)
}

// deliveries compares the broker's copies with the database: aborted and
// unexpected deliveries, and lost messages.
func (c *checker) deliveries() {
	r := c.r
	for _, id := range sortedKeys(c.copies) {
		if _, ok := c.committed[id]; ok {
			continue
		}
		if _, tried := c.outcome[id]; tried {
			r.Aborted++
			c.example("aborted", id)
		} else {
			r.Unexpected++
			c.example("unexpected", id)
		}
	}
	for _, id := range sortedKeys(c.committed) {
		if c.copies[id] == 0 {
			r.Lost++
			c.example("lost", id)
		}
	}
}

// duplicates counts extra copies, and whether a fault or a lease takeover
// explains them. A relay sends a message again only after a fault struck
// while the message was in flight, or after its lease expired and another
// relay claimed it again (its attempt count says how often that happened).
func (c *checker) duplicates() {
	r := c.r
	inFlight := map[string]bool{}
	for _, f := range c.in.Faults {
		r.DupBound += len(f.InFlight)
		for _, id := range f.InFlight {
			inFlight[id] = true
		}
	}
	reclaims := map[string]int{}
	for _, row := range c.in.Rows {
		if row.Outbox && row.Attempts > 1 && !inFlight[row.ID] {
			reclaims[row.ID] = row.Attempts - 1
			r.DupBound += row.Attempts - 1
		}
	}
	for _, id := range sortedKeys(c.copies) {
		extra := c.copies[id] - 1
		if extra <= 0 {
			continue
		}
		r.Duplicates += extra
		switch {
		case inFlight[id]:
			r.ExplainedDups += extra
		case extra <= reclaims[id]:
			r.ExplainedDups += extra
			r.TakeoverDups += extra
		default:
			r.UnexplainedDups += extra
			c.example("unexplained_dups", id)
		}
	}
}

// gaps checks that each aggregate's committed sequences are 1..k.
func (c *checker) gaps() {
	bySeq := map[string][]int64{}
	for _, ref := range c.committed {
		bySeq[ref.Aggregate] = append(bySeq[ref.Aggregate], ref.Seq)
	}
	for _, agg := range sortedKeys(bySeq) {
		seqs := bySeq[agg]
		slices.Sort(seqs)
		for i, s := range seqs {
			if s != int64(i+1) {
				c.r.Gaps++
				c.example("gaps", fmt.Sprintf("%s seq %d at position %d", agg, s, i+1))
				break
			}
		}
	}
}

// ordering checks the order per aggregate: first deliveries must come in
// sequence, and any later copy of an older sequence is a raw reorder.
func (c *checker) ordering() {
	r := c.r
	lastFirst := map[string]int64{} // highest seq first-delivered per aggregate
	maxSeen := map[string]int64{}
	first := map[string]bool{}
	for _, d := range c.order {
		ref, ok := c.committed[d.ID]
		if !ok {
			continue // counted as aborted or unexpected
		}
		if ref.Seq < maxSeen[ref.Aggregate] {
			r.RawReorders++
		}
		maxSeen[ref.Aggregate] = max(maxSeen[ref.Aggregate], ref.Seq)
		if first[d.ID] {
			continue
		}
		first[d.ID] = true
		if ref.Seq != lastFirst[ref.Aggregate]+1 {
			r.OrderViolations++
			c.example("order_violations", fmt.Sprintf("%s: seq %d after %d", ref.Aggregate, ref.Seq, lastFirst[ref.Aggregate]))
		}
		lastFirst[ref.Aggregate] = max(lastFirst[ref.Aggregate], ref.Seq)
	}
}

// Violations returns one line per pass condition the run broke: lost,
// unexpected, aborted, acked_commit_lost, torn, unexplained_dups,
// duplicates above the bound, gaps, dead, pending, order_violations (only
// when Ordered), and the scenario's own Checks. An empty result is a pass.
func (r *Report) Violations() []string {
	var v []string
	must0 := []struct {
		name string
		n    int
	}{
		{"lost", r.Lost}, {"unexpected", r.Unexpected}, {"aborted", r.Aborted},
		{"acked_commit_lost", r.AckedCommitLost}, {"torn", r.Torn},
		{"unexplained_dups", r.UnexplainedDups}, {"gaps", r.Gaps}, {"dead", r.Dead}, {"pending", r.Pending},
	}
	if r.Ordered {
		must0 = append(must0, struct {
			name string
			n    int
		}{"order_violations", r.OrderViolations})
	}
	for _, c := range must0 {
		if c.n != 0 {
			line := fmt.Sprintf("%s = %d, want 0", c.name, c.n)
			if ids := r.Examples[c.name]; len(ids) > 0 {
				line += " (e.g. " + strings.Join(ids, ", ") + ")"
			}
			v = append(v, line)
		}
	}
	if r.Duplicates > r.DupBound {
		v = append(v, fmt.Sprintf("duplicates = %d, above the bound %d (in flight at faults, plus takeovers)", r.Duplicates, r.DupBound))
	}
	return append(v, r.Checks...)
}

// reportColumns are the columns of [Table], in order.
var reportColumns = []struct {
	head string
	val  func(*Report) string
}{
	{"scenario", func(r *Report) string { return r.Scenario }},
	{"ordered", func(r *Report) string { return yesNo(r.Ordered) }},
	{"faults", func(r *Report) string { return itoa(r.Faults) }},
	{"committed", func(r *Report) string { return itoa(r.Committed) }},
	{"rolled back", func(r *Report) string { return itoa(r.RolledBack) }},
	{"unknown", func(r *Report) string { return fmt.Sprintf("%d/%d", r.Recovered, r.Indeterminate) }},
	{"delivered", func(r *Report) string { return itoa(r.Delivered) }},
	{"lost", func(r *Report) string { return itoa(r.Lost) }},
	{"unexpected", func(r *Report) string { return itoa(r.Unexpected + r.Aborted) }},
	{"dups", func(r *Report) string { return fmt.Sprintf("%d (%d expl.)", r.Duplicates, r.ExplainedDups) }},
	{"dup bound", func(r *Report) string { return itoa(r.DupBound) }},
	{"order viol.", func(r *Report) string { return itoa(r.OrderViolations) }},
	{"reorders", func(r *Report) string { return itoa(r.RawReorders) }},
	{"recovery", func(r *Report) string { return fmt.Sprintf("%.1fs", r.RecoverySeconds) }},
	{"result", func(r *Report) string {
		if len(r.Violations()) == 0 {
			return "pass"
		}
		return "FAIL"
	}},
}

// Table formats reports as a Markdown table, one row per report, with the
// counts the pass condition is about. "unexpected" adds aborted reads to
// never-written messages; "unknown" is recovered/indeterminate commits.
func Table(reports ...*Report) string {
	var b strings.Builder
	heads := make([]string, len(reportColumns))
	for i, c := range reportColumns {
		heads[i] = c.head
	}
	b.WriteString("| " + strings.Join(heads, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(heads)) + "\n")
	for _, r := range reports {
		cells := make([]string, len(reportColumns))
		for i, c := range reportColumns {
			cells[i] = c.val(r)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

func itoa(n int) string { return fmt.Sprint(n) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
