package chaos

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// A small run every checker case starts from: aggregate a has seqs 1..3 and
// aggregate b seq 1, all committed and delivered once in order; x was
// rolled back on purpose and never delivered.
var (
	a1, a2, a3 = Ref{"a1", "a", 1}, Ref{"a2", "a", 2}, Ref{"a3", "a", 3}
	b1         = Ref{"b1", "b", 1}
	x1         = Ref{"x1", "a", 4}
)

func baseInput() Input {
	t0 := time.Unix(1000, 0)
	return Input{
		Produces: []Produce{
			{Messages: []Ref{a1, a2}, Outcome: OK, Start: t0, End: t0},
			{Messages: []Ref{b1}, Outcome: OK, Start: t0, End: t0},
			{Messages: []Ref{a3}, Outcome: OK, Start: t0, End: t0},
			{Messages: []Ref{x1}, Outcome: Fail, Deliberate: true, Start: t0, End: t0},
		},
		Rows:       []Row{sent(a1), sent(a2), sent(a3), sent(b1)},
		Deliveries: []Delivery{deliver(a1, "1"), deliver(a2, "2"), deliver(b1, "3"), deliver(a3, "4")},
		Ordered:    true,
	}
}

func sent(r Ref) Row {
	return Row{Ref: r, Business: true, Outbox: true, Status: outbox.StatusSent, Attempts: 1}
}

func deliver(r Ref, pos string) Delivery { return Delivery{Ref: r, Position: pos} }

// counts returns a report's numeric fields by JSON name.
func counts(t *testing.T, r *Report) map[string]float64 {
	t.Helper()
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	out := map[string]float64{}
	for k, v := range m {
		if f, ok := v.(float64); ok {
			out[k] = f
		}
	}
	return out
}

func TestCheckBaseline(t *testing.T) {
	t.Parallel()
	r := Check(baseInput())
	require.Empty(t, r.Violations())
	want := map[string]float64{
		"transactions": 4, "attempted": 5, "committed": 4, "rolled_back": 1, "deliberate": 1,
		"delivered": 4, "deliveries": 4,
	}
	for k, v := range counts(t, r) {
		require.Equal(t, want[k], v, k)
	}
}

// TestCheckClasses changes the baseline run in one way per case and checks
// that exactly the expected counters move, and which pass conditions break.
func TestCheckClasses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(in *Input)
		moved  map[string]float64 // counters that differ from the baseline, with their values
		broken []string           // the expected violations, in order; none = pass
	}{
		{
			name:   "Lost",
			change: func(in *Input) { in.Deliveries = in.Deliveries[:3] },
			moved:  map[string]float64{"lost": 1, "delivered": 3, "deliveries": 3},
			broken: []string{"lost = 1, want 0 (e.g. a3)"},
		},
		{
			name:   "Unexpected",
			change: func(in *Input) { in.Deliveries = append(in.Deliveries, deliver(Ref{"zz", "z", 1}, "5")) },
			moved:  map[string]float64{"unexpected": 1, "delivered": 5, "deliveries": 5},
			broken: []string{"unexpected = 1, want 0 (e.g. zz)"},
		},
		{
			name:   "AbortedReadOfARolledBackMessage",
			change: func(in *Input) { in.Deliveries = append(in.Deliveries, deliver(x1, "5")) },
			moved:  map[string]float64{"aborted": 1, "delivered": 5, "deliveries": 5},
			broken: []string{"aborted = 1, want 0 (e.g. x1)"},
		},
		{
			name:   "IndeterminateCommitRecovered",
			change: func(in *Input) { in.Produces[1].Outcome = Info },
			moved:  map[string]float64{"indeterminate": 1, "recovered": 1},
		},
		{
			name: "IndeterminateCommitThatDidNotHappen",
			change: func(in *Input) {
				in.Produces[2].Outcome = Info
				in.Rows = in.Rows[:2]
				in.Rows = append(in.Rows, sent(b1))
				in.Deliveries = in.Deliveries[:3]
			},
			moved: map[string]float64{"indeterminate": 1, "committed": 3, "rolled_back": 2, "delivered": 3, "deliveries": 3},
		},
		{
			name: "AcknowledgedCommitForgotten",
			change: func(in *Input) {
				in.Rows = []Row{sent(a1), sent(a2), sent(b1)}
				in.Deliveries = in.Deliveries[:3]
			},
			moved:  map[string]float64{"acked_commit_lost": 1, "committed": 3, "rolled_back": 2, "delivered": 3, "deliveries": 3},
			broken: []string{"acked_commit_lost = 1, want 0 (e.g. a3)"},
		},
		{
			name:   "TornTransaction",
			change: func(in *Input) { in.Rows[3].Outbox = false },
			moved:  map[string]float64{"torn": 1},
			broken: []string{"torn = 1, want 0 (e.g. b1)"},
		},
		{
			name: "LogOnlyRowsAreNotTorn",
			change: func(in *Input) {
				in.LogOnly = true
				for i := range in.Rows {
					in.Rows[i].Outbox = false
				}
			},
		},
		{
			name: "DuplicateInFlightAtAFault",
			change: func(in *Input) {
				in.Deliveries = append(in.Deliveries, deliver(a2, "5"))
				in.Faults = []Fault{{Kind: "kill9", InFlight: []string{a2.ID}}}
			},
			moved: map[string]float64{"duplicates": 1, "explained_dups": 1, "dup_bound": 1, "faults": 1,
				"deliveries": 5, "raw_reorders": 1},
		},
		{
			name: "DuplicateAfterALeaseTakeover",
			change: func(in *Input) {
				in.Rows[1].Attempts = 2
				in.Deliveries = append(in.Deliveries, deliver(a2, "5"))
			},
			moved: map[string]float64{"duplicates": 1, "explained_dups": 1, "takeover_dups": 1, "dup_bound": 1,
				"deliveries": 5, "raw_reorders": 1},
		},
		{
			name: "MoreCopiesThanTakeovers",
			change: func(in *Input) {
				in.Rows[1].Attempts = 2
				in.Deliveries = append(in.Deliveries, deliver(a2, "5"), deliver(a2, "6"))
			},
			moved: map[string]float64{"duplicates": 2, "unexplained_dups": 2, "dup_bound": 1,
				"deliveries": 6, "raw_reorders": 2},
			broken: []string{"unexplained_dups = 2, want 0 (e.g. a2)", "duplicates = 2, above the bound 1 (in flight at faults, plus takeovers)"},
		},
		{
			name:   "DuplicateNoFaultExplains",
			change: func(in *Input) { in.Deliveries = append(in.Deliveries, deliver(a2, "5")) },
			moved:  map[string]float64{"duplicates": 1, "unexplained_dups": 1, "deliveries": 5, "raw_reorders": 1},
			broken: []string{"unexplained_dups = 1, want 0 (e.g. a2)", "duplicates = 1, above the bound 0 (in flight at faults, plus takeovers)"},
		},
		{
			name: "DuplicatesAboveTheBound",
			change: func(in *Input) {
				in.Deliveries = append(in.Deliveries, deliver(b1, "5"), deliver(b1, "6"))
				in.Faults = []Fault{{Kind: "sigstop", InFlight: []string{b1.ID}}}
			},
			moved:  map[string]float64{"duplicates": 2, "explained_dups": 2, "dup_bound": 1, "faults": 1, "deliveries": 6},
			broken: []string{"duplicates = 2, above the bound 1 (in flight at faults, plus takeovers)"},
		},
		{
			name:   "OneCopyReadTwiceIsNotADuplicate",
			change: func(in *Input) { in.Deliveries = append(in.Deliveries, deliver(a3, "4")) },
			moved:  map[string]float64{},
		},
		{
			name: "FirstDeliveriesOutOfOrder",
			change: func(in *Input) {
				in.Deliveries = []Delivery{deliver(a2, "1"), deliver(a1, "2"), deliver(b1, "3"), deliver(a3, "4")}
			},
			moved:  map[string]float64{"order_violations": 2, "raw_reorders": 1},
			broken: []string{"order_violations = 2, want 0 (e.g. a: seq 2 after 0, a: seq 1 after 2)"},
		},
		{
			name: "FirstDeliveriesOutOfOrderWithoutOrdering",
			change: func(in *Input) {
				in.Ordered = false
				in.Deliveries = []Delivery{deliver(a2, "1"), deliver(a1, "2"), deliver(b1, "3"), deliver(a3, "4")}
			},
			moved: map[string]float64{"order_violations": 2, "raw_reorders": 1},
		},
		{
			name: "StaleCopyAfterALaterSeqIsAReorderNotAViolation",
			change: func(in *Input) {
				in.Deliveries = append(in.Deliveries, deliver(a1, "5"))
				in.Faults = []Fault{{Kind: "sigstop", InFlight: []string{a1.ID}}}
			},
			moved: map[string]float64{"raw_reorders": 1, "duplicates": 1, "explained_dups": 1, "dup_bound": 1,
				"faults": 1, "deliveries": 5},
		},
		{
			name: "GapInAnAggregatesCommittedSequence",
			change: func(in *Input) {
				g := Ref{"g3", "g", 3}
				in.Produces = append(in.Produces, Produce{Messages: []Ref{g}, Outcome: OK})
				in.Rows = append(in.Rows, sent(g))
				in.Deliveries = append(in.Deliveries, deliver(g, "5"))
			},
			moved: map[string]float64{"gaps": 1, "order_violations": 1, "transactions": 5, "attempted": 6,
				"committed": 5, "delivered": 5, "deliveries": 5},
			broken: []string{"gaps = 1, want 0 (e.g. g seq 3 at position 1)",
				"order_violations = 1, want 0 (e.g. g: seq 3 after 0)"},
		},
		{
			name: "DeadAndPendingRows",
			change: func(in *Input) {
				in.Rows[2].Status = outbox.StatusDead
				in.Rows[3].Status = outbox.StatusPending
			},
			moved:  map[string]float64{"dead": 1, "pending": 1},
			broken: []string{"dead = 1, want 0 (e.g. a3)", "pending = 1, want 0 (e.g. b1)"},
		},
	}
	base := counts(t, Check(baseInput()))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := baseInput()
			tc.change(&in)
			r := Check(in)
			got := counts(t, r)
			for k, v := range base {
				want := v
				if m, ok := tc.moved[k]; ok {
					want = m
				}
				require.Equal(t, want, got[k], "counter %s", k)
			}
			require.Equal(t, tc.broken, r.Violations())
		})
	}
}

func TestReportChecksAndTable(t *testing.T) {
	t.Parallel()
	r := Check(baseInput())
	r.Scenario = "postgres/nats/kill9"
	require.Contains(t, Table(r), "| postgres/nats/kill9 | yes | 0 | 4 | 1 | 0/0 | 4 | 0 | 0 | 0 (0 expl.) | 0 | 0 | 0 | 0.0s | pass |")
	r.Checks = []string{"relay-2 was not running after the heal"}
	require.Equal(t, []string{"relay-2 was not running after the heal"}, r.Violations())
	require.Contains(t, Table(r), "| FAIL |")
	header := strings.SplitN(Table(r), "\n", 2)[0]
	require.Equal(t, len(reportColumns), strings.Count(header, "|")-1)
}
