package mysqlstore

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/rowcheck"
)

// Ordered claims hand out runs (runs.go). When the rows a claim locked first
// were mostly blocked behind earlier rows, it also takes heads: rows with no
// earlier row of their aggregate that is pending (or dead, when dead rows
// block), as ordered claims did before runs; this file builds those
// statements. Walking the
// pending rows in id order and probing each one's aggregate finds heads
// cheaply while they are dense at the front of the backlog (many
// aggregates), but when a few aggregates hold a deep backlog, a claim that
// finds fewer heads than its limit would walk, and probe, the whole backlog:
// draining becomes quadratic. So, when the table has the head index
// (status, aggregate_type, aggregate_id, id), which Migrate creates, an
// ordered claim, inside its one READ COMMITTED transaction:
//
//  1. reads the id of the window's last row, the orderedWindow(limit)-th due
//     pending row (a plain index read; none when the backlog is shorter);
//  2. walks the due pending rows up to that id, probing the head index twice
//     per row (an earlier pending row, an earlier dead row);
//  3. only when that found fewer heads than the limit and more rows lie
//     beyond the window: reads every aggregate's first pending and first
//     dead row with a loose index scan of the head index (one index dive per
//     aggregate and status, not per row) and claims the heads among them,
//     oldest first.
//
// Steps 2 and 3 lock with SKIP LOCKED the rows that were heads in the
// statement's snapshot; what the claim keeps of them is decided afterwards,
// with every other row it locked, by the fresh read of runs.go. The cost is
// bounded by the window plus one dive per aggregate. A table without the
// head index reads the backlog instead (heads.go).

// orderedWindow is how many due pending rows the walk looks at for a claim
// of limit rows.
func orderedWindow(limit int) int { return max(4*limit, 256) }

// orderedSQL are the statements of an ordered claim on a table with the head index.
type orderedSQL struct {
	// slot says that each statement also takes ClaimParams.Slots and Slot
	// (slotHash), right before the limit (bound: last): the heads of the
	// slot's aggregates only (orderedSlotSQL).
	slot bool
	// The window starts above its first parameter, after: the rows up to
	// the last one the claim's first step locked, in id order, are locked by
	// this claim or by another one (see lockHeads).
	bound string // step 1: the window's last id; parameter: after
	walk  string // step 2: parameters: after, the bound, the limit
	heads string // step 3: parameter: the limit; its rows end with the number of aggregates
}

const due = "(%[1]s.next_retry_at IS NULL OR %[1]s.next_retry_at <= UTC_TIMESTAMP(6))"

// orderedClaimSQL builds the statements of an ordered claim, or returns nil
// when the table lacks the head index (the claim then walks the whole
// backlog with the statement of claimSQL).
func (s *Store) orderedClaimSQL(info tableInfo, p outbox.ClaimParams, sel []string) *orderedSQL {
	return s.orderedSQLWhere(info, p, sel, "", "")
}

// orderedSlotSQL is orderedClaimSQL restricted to the heads of the rows
// whose aggregates hash to the slot (ClaimParams.Slot): a claim with a slot
// preference takes those heads first.
func (s *Store) orderedSlotSQL(info tableInfo, p outbox.ClaimParams, sel []string) *orderedSQL {
	ord := s.orderedSQLWhere(info, p, sel, " AND "+slotHash+" = ?",
		" AND "+strings.ReplaceAll(slotHash, "c.", "w.")+" = ?")
	if ord != nil {
		ord.slot = true
	}
	return ord
}

// orderedSQLWhere builds the statements of orderedClaimSQL with extra added
// to the conditions on the claimed rows c and extraW to those on the
// window's rows w.
func (s *Store) orderedSQLWhere(info tableInfo, p outbox.ClaimParams, sel []string, extra, extraW string) *orderedSQL {
	if !p.Ordered || info.headIndex == "" {
		return nil
	}
	t := s.table.quoted()
	claimIdx := ""
	if info.claimIndex != "" {
		claimIdx = " FORCE INDEX (" + quoteIdent(info.claimIndex) + ")"
	}
	headIdx := " FORCE INDEX (" + quoteIdent(info.headIndex) + ")"
	selectCols := "SELECT c.id, " + nextAttempt("c.retry_count") + ", " + claimColumns(sel, rowcheck.PayloadLimit(p.MaxPayload))
	head := selectCols + " FROM " + t + " AS c"
	blocking := "0"
	walk := head + claimIdx + " WHERE c.status = 0 AND " + fmt.Sprintf(due, "c") + " AND c.id > ? AND c.id <= ?" + extra +
		" AND NOT " + earlierRow(t, headIdx, "0")
	if p.BlockOnDead {
		blocking = "0, 2"
		walk += " AND NOT " + earlierRow(t, headIdx, "2")
	}
	return &orderedSQL{
		bound: "SELECT w.id FROM " + t + " AS w" + claimIdx + " WHERE w.status = 0 AND " + fmt.Sprintf(due, "w") +
			" AND w.id > ?" + extraW + " ORDER BY w.id LIMIT 1 OFFSET " + strconv.Itoa(orderedWindow(p.Limit)-1),
		walk: walk + " ORDER BY c.id LIMIT ? FOR UPDATE SKIP LOCKED",
		// The inner GROUP BY names the index's leading columns so that MySQL and
		// MariaDB read it with a loose index scan ("Using index for group-by"):
		// the first row of each (status, aggregate); the outer one keeps the
		// earlier of an aggregate's first pending and first dead row, and
		// counts the aggregates (the last column).
		heads: selectCols + ", hd.aggs FROM " + t + " AS c JOIN (SELECT MIN(g.first) AS id, COUNT(*) OVER () AS aggs FROM (SELECT aggregate_type, aggregate_id, MIN(id) AS first FROM " +
			t + headIdx + " WHERE status IN (" + blocking + ") GROUP BY status, aggregate_type, aggregate_id) AS g" +
			" GROUP BY g.aggregate_type, g.aggregate_id) AS hd ON c.id = hd.id" +
			" WHERE c.status = 0 AND " + fmt.Sprintf(due, "c") + extra + " ORDER BY c.id LIMIT ? FOR UPDATE SKIP LOCKED",
	}
}

// When a few aggregates (no more than a claim's limit) hold a deep backlog,
// claims come back short whenever other relays hold some of the heads, and
// each short claim paid for the window, the walk and the loose scan. The
// loose scan alone visits every aggregate, fewer than the rows of the window,
// and can take every head there is, so the order in which it finds them does
// not matter. So the loose scan also counts the aggregates, and while the
// last count is at most the limit, a claim runs the loose scan alone. A scan
// that takes nothing (every head is held) keeps the last count; one that
// counts more aggregates than the limit sends the next claims back to the
// walk.

// fewAggregates reports whether an ordered claim with p should skip the walk
// and run the loose scan alone.
func (s *Store) fewAggregates(p outbox.ClaimParams) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.aggregates[policyIndex(p)]
	return n > 0 && n <= int64(p.Limit)
}

// countAggregates records the aggregates a loose scan counted; 0 (it took no
// row, so the count did not come back) keeps the last count.
func (s *Store) countAggregates(p outbox.ClaimParams, n int64) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aggregates[policyIndex(p)] = n
}

func policyIndex(p outbox.ClaimParams) int {
	if p.BlockOnDead {
		return 1
	}
	return 0
}

// earlierRow is the condition "row c has an earlier row of its aggregate
// with this status", for tables with the head index. It reads the first such
// row of the aggregate, one index dive that stops at the first entry, and
// compares ids. The obvious NOT EXISTS (... AND h.id < c.id) costs far more
// here: MySQL and MariaDB look the aggregate up by (status, aggregate_type,
// aggregate_id) and filter on id afterwards, so for a head, where no row
// matches, the probe reads every pending row of its aggregate: on a deep
// backlog of few aggregates, hundreds of entries per probe. The subquery
// depends on the aggregate only, so MariaDB also caches it for the rows of
// one aggregate. A NULL (no such row) counts as none earlier.
func earlierRow(t, headIdx, status string) string {
	return "COALESCE((SELECT h.id FROM " + t + " AS h" + headIdx + " WHERE h.status = " + status +
		" AND h.aggregate_type = c.aggregate_type AND h.aggregate_id = c.aggregate_id ORDER BY h.id LIMIT 1), c.id) < c.id"
}
