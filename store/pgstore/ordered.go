package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// An ordered claim hands out only heads: rows with no earlier row of their
// aggregate that is pending (or dead, when dead rows block). Finding heads by
// walking the pending rows in id order and probing each one's aggregate is
// cheap while heads are dense at the front of the backlog (many aggregates),
// but when a few aggregates hold a deep backlog, a claim that finds fewer
// heads than its limit walks the whole backlog, one probe per row: draining
// becomes quadratic. So, when the table has the head index (created by
// Migrate), an ordered claim runs in up to three statements:
//
//  1. the walk, bounded to a window of the first due pending rows, which also
//     reports whether more due rows lie beyond the window;
//  2. only when the window did not yield enough heads and more rows lie
//     beyond it: a skip scan of the head index, one probe per aggregate,
//     that hands out heads aggregate by aggregate from where the last one
//     stopped (a round robin, so that no aggregate waits behind others);
//  3. the same skip scan from the first aggregate up to that point, when (2)
//     reached the last aggregate without enough heads.
//
// Every statement claims only rows that were heads in its snapshot and locks
// them with SKIP LOCKED, exactly as the single walk did, so the guarantee is
// unchanged; only the cost is: at most the window plus one probe per
// aggregate visited. A table without the head index keeps the single,
// unbounded walk.
//
// A claim that comes back short (other relays hold some of the heads, or
// messages wait out a backoff) runs the skip scan every time, and when the
// skip scan goes through every aggregate without filling the claim, it
// reports how many aggregates it visited. When that count is at most the
// claim's limit, the next claim skips the walk and runs the skip scan alone,
// from the first aggregate: it visits every aggregate, fewer than the rows
// the window holds, in one statement instead of three, and can take every
// head there is, so the order in which it finds them does not matter. This
// is the common shape of a deep backlog of few aggregates (fewer than the
// batch size), where the walk and the skip scan each cost as much as the
// whole claim should. A skip scan that fills the claim, or visits more
// aggregates than the limit, sends the next claim back to the walk.

// headIndexSuffix names the index the skip scan reads: (aggregate_type,
// aggregate_id, id) of pending and dead rows, in the "C" collation so that
// the round-robin cursor compares the way Go compares strings.
const headIndexSuffix = "_head_idx"

// orderedWindow is how many due pending rows the walk looks at for a claim
// of limit rows.
func orderedWindow(limit int) int { return max(4*limit, 256) }

// orderedQueries are the statements of ordered claims, for one dead policy.
type orderedQueries struct {
	// walk is the bounded walk; $1 limit, $2 lease µs, $3 window. It returns
	// the claimed columns plus "beyond" (more due rows lie beyond the window).
	walk string
	// headsFrom is the skip scan of aggregates after ($3, $4); $1 limit, $2
	// lease µs. It returns the claimed columns plus the number of aggregates
	// it visited when it went through all of them without filling the limit
	// (NULL otherwise).
	headsFrom string
	headsUpTo string // the same for the aggregates up to ($3, $4) inclusive
	// byStatus is the claim of a table without the head index (indexes.go);
	// $1 limit, $2 lease µs, $3 window. It returns the claimed columns plus
	// "beyond" (the window was full).
	byStatus string
	// byStatusAll is byStatus for a window of the whole backlog, which
	// reads every pending row and so needs no check through the
	// aggregates' history; $3 is math.MaxInt64.
	byStatusAll string
}

// orderedState is what a Store knows about its table for ordered claims.
type orderedState struct {
	headIndex bool
	q         [2]orderedQueries // by blockOnDead: 0 = dead rows do not block, 1 = they do
	// slotQ are q restricted to the heads of a slot's aggregates
	// (ClaimParams.Slot): each takes Slots and the slot after its other
	// parameters, then the payload limit.
	slotQ [2]orderedQueries
	runs  [2]runsQueries // the same for runs claims (runs.go)
	// aggs is, by blockOnDead, how many aggregates (with a pending row, or a
	// dead one when dead rows block) the last skip scan that went through
	// all of them visited; 0 when unknown. Guarded by Store.mu.
	aggs [2]int64
	// headsPaused is how many more heads claims on a table without the
	// head index read only their window (claimOrderedByStatus): [0] of
	// any aggregate, [1] of a slot's.
	headsPaused [2]sqlcore.Pause
	// perAggregate is how many rows, in thousandths, each aggregate a
	// claim by aggregate read offered in the last one (runs.go); 0 when
	// unknown.
	perAggregate atomic.Int64
}

// orderedCursor is where the skip scan stopped: the last aggregate it
// claimed from. Shared by the relays of one Store.
type orderedCursor struct {
	set     bool
	aggType string
	aggID   string
}

// slotCond is the condition inSlot(n) on a line of its own.
func slotCond(n int) string { return "\n\t  AND " + inSlot(n) }

// withSlot adds slotCond(n) to the claimed rows' conditions of a heads
// statement, before their ORDER BY or LIMIT.
func withSlot(sql string, n int) string {
	for _, at := range []string{"\n\tORDER BY o.id\n\tLIMIT $1\n\tFOR UPDATE OF o SKIP LOCKED", "\n\tLIMIT $1\n\tFOR UPDATE OF o SKIP LOCKED"} {
		if strings.Contains(sql, at) {
			return strings.Replace(sql, at, slotCond(n)+at, 1)
		}
	}
	panic("pgstore: no place for the slot condition in " + sql)
}

// buildSlotOrderedQueries builds the statements of buildOrderedQueries
// restricted to the heads of a slot's aggregates (orderedState.slotQ).
func buildSlotOrderedQueries(table string, q *queries, async string) [2]orderedQueries {
	return orderedQueriesOf(table, q, async, true)
}

// buildOrderedQueries builds the statements; async is the filter that turns
// off synchronous commit for the statement (WithAsyncCommit), or "".
func buildOrderedQueries(table string, q *queries, async string) [2]orderedQueries {
	return orderedQueriesOf(table, q, async, false)
}

// orderedQueriesOf builds the ordered statements, with slot the slot
// condition (withSlot) in each, which takes the two parameters before the
// payload limit's.
func orderedQueriesOf(table string, q *queries, async string, slot bool) [2]orderedQueries {
	update := indent(fmt.Sprintf(orderedUpdateSQL, table, q.columnList, nextAttempt("o.retry_count")))
	const key = `(h.aggregate_type COLLATE "C", h.aggregate_id COLLATE "C")`
	// stmt places the slot condition, when there is one, at parameter next,
	// and the payload limit after it.
	stmt := func(sql string, next int) string {
		if slot {
			sql, next = withSlot(sql, next), next+2
		}
		return payloadParam(sql, next)
	}
	var out [2]orderedQueries
	for i, blocking := range []string{"0", "0, 2"} {
		sql := func(format string, args ...any) string {
			return fmt.Sprintf(format, append([]any{table, blocking}, args...)...)
		}
		dead := "" // the dead rows in held, when they block
		if i == 1 {
			dead = fmt.Sprintf(orderedDeadSQL, table)
		}
		out[i] = orderedQueries{
			walk:        stmt(sql(orderedWalkSQL, update, async), 4), // after $1 limit, $2 lease µs, $3 window
			byStatus:    stmt(sql(orderedByStatusSQL, update, async, dead, sql(orderedEarlierSQL)), 4),
			byStatusAll: stmt(sql(orderedByStatusSQL, update, async, dead, ""), 4),
			// After $1 limit, $2 lease µs, $3 and $4 the aggregate: $5.
			headsFrom: stmt(sql(orderedHeadsSQL, key+" > ($3::text, $4::text)", "", update, async), 5),
			headsUpTo: stmt(sql(orderedHeadsSQL, key+" <= ($3::text, $4::text)",
				"\n\t\t  AND "+key+" <= ($3::text, $4::text)", update, async), 5),
		}
	}
	// out[0] is "0" (DeadSkips), out[1] is "0, 2" (DeadBlocks).
	return out
}

// The statements of ordered claims. Each takes the table as %[1]s and the
// statuses that block an aggregate as %[2]s ("0" for DeadSkips, "0, 2" for
// DeadBlocks).
const (
	// orderedUpdateSQL leases the claimed rows c and counts their attempt
	// (%[2]s: the columns returned, %[3]s: the next retry count).
	orderedUpdateSQL = `UPDATE %[1]s AS o
SET retry_count = %[3]s,
	next_retry_at = now() + $2::bigint * interval '1 microsecond',
	updated_at = now()
FROM c
WHERE o.id = c.id
RETURNING %[2]s`

	// orderedWalkSQL claims from the head index. The walk probes only the
	// first row of each aggregate in the window: a later row of the same
	// aggregate there is never a head, since that first row is pending
	// before it. With a few aggregates holding a deep backlog, that is one
	// probe per aggregate instead of one per row. %[3]s: the update, %[4]s:
	// the async-commit clause.
	orderedWalkSQL = `WITH win AS (
	SELECT w.id, w.aggregate_type, w.aggregate_id FROM %[1]s AS w
	WHERE w.status = 0 AND (w.next_retry_at IS NULL OR w.next_retry_at <= now())%[4]s
	ORDER BY w.id
	LIMIT $3::bigint + 1
), firsts AS (
	SELECT min(x.id) AS id FROM (SELECT id, aggregate_type, aggregate_id FROM win ORDER BY id LIMIT $3) AS x
	GROUP BY x.aggregate_type, x.aggregate_id
), c AS (
	SELECT o.id FROM %[1]s AS o
	WHERE o.id IN (SELECT id FROM firsts)
	  AND o.status = 0 AND (o.next_retry_at IS NULL OR o.next_retry_at <= now())
	  AND NOT EXISTS (SELECT 1 FROM %[1]s AS p
		WHERE p.aggregate_type COLLATE "C" = o.aggregate_type AND p.aggregate_id COLLATE "C" = o.aggregate_id
		  AND p.id < o.id AND p.status IN (%[2]s))
	ORDER BY o.id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED
), u AS (
%[3]s
)
SELECT u.*, b.beyond FROM (SELECT count(*) > $3 AS beyond FROM win) AS b LEFT JOIN u ON true`

	// orderedByStatusSQL claims without the head index (claimOrderedByStatus).
	// The window is read from the contract's (status, next_retry_at) index
	// (indexes.go): due is the rows due again, fresh the rows never claimed,
	// in the index's order; held is the pending rows not due (leased, or
	// waiting out a backoff: about what is in flight) and, when dead rows
	// block, the dead rows (%[5]s). firsts is each aggregate's first row in
	// the window, open those of them with no earlier row in held. A row
	// never claimed outside the window may still come earlier in id order
	// (the index keeps those rows in the order of their place in the table,
	// not of their ids): %[6]s is the check for that, in the aggregate's
	// rows in (aggregate_type, aggregate_id), as many as the table keeps of
	// it; the statement that reads the whole backlog, where the window holds
	// every row never claimed, leaves it out. The open rows are probed in id
	// order (= ANY of an array walks the primary key in order, with no
	// sort), so the claim stops probing once it has its heads, the oldest
	// ones.
	orderedByStatusSQL = `WITH due AS (
	SELECT w.id, w.aggregate_type, w.aggregate_id FROM %[1]s AS w
	WHERE w.status = 0 AND w.next_retry_at <= now()
	ORDER BY w.status, w.next_retry_at
	LIMIT $3
), fresh AS (
	SELECT w.id, w.aggregate_type, w.aggregate_id FROM %[1]s AS w
	WHERE w.status = 0 AND w.next_retry_at IS NULL
	ORDER BY w.status, w.next_retry_at
	LIMIT (SELECT $3 - count(*) FROM due)
), held AS MATERIALIZED (
	SELECT w.id, w.aggregate_type, w.aggregate_id FROM %[1]s AS w
	WHERE w.status = 0 AND w.next_retry_at > now()%[5]s
), firsts AS (
	SELECT min(x.id) AS id, x.aggregate_type, x.aggregate_id FROM (SELECT * FROM due UNION ALL SELECT * FROM fresh) AS x
	GROUP BY x.aggregate_type, x.aggregate_id
), open AS (
	SELECT f.id FROM firsts AS f
	WHERE NOT EXISTS (SELECT 1 FROM held AS h
		WHERE h.aggregate_type = f.aggregate_type AND h.aggregate_id = f.aggregate_id AND h.id < f.id)
), c AS (
	SELECT o.id FROM %[1]s AS o
	WHERE o.id = ANY (ARRAY(SELECT id FROM open))
	  AND o.status = 0 AND (o.next_retry_at IS NULL OR o.next_retry_at <= now())%[6]s%[4]s
	ORDER BY o.id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED
), u AS (
%[3]s
)
SELECT u.*, b.beyond FROM (SELECT (SELECT count(*) FROM due) + (SELECT count(*) FROM fresh) >= $3 AS beyond) AS b
	LEFT JOIN u ON true`

	// orderedEarlierSQL is the check of orderedByStatusSQL for a row never
	// claimed outside its window: %[1]s the table, %[2]s the blocking
	// statuses.
	orderedEarlierSQL = `
	  AND NOT EXISTS (SELECT 1 FROM %[1]s AS p
		WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id
		  AND p.id < o.id AND p.status IN (%[2]s))`

	// orderedDeadSQL adds the dead rows to held (orderedByStatusSQL) when
	// dead rows block: %[1]s the table.
	orderedDeadSQL = `
	UNION ALL
	SELECT w.id, w.aggregate_type, w.aggregate_id FROM %[1]s AS w
	WHERE w.status = 2`

	// orderedHeadsSQL walks the head index one aggregate at a time: each
	// step finds the first pending or dead row of the next aggregate, which
	// is its head (for DeadSkips, the first pending row). %[3]s bounds the
	// first step, %[4]s the next ones. The count of visited aggregates
	// costs nothing more: it is taken only when c came back short, so the
	// recursion already ran to the end and heads is fully computed.
	orderedHeadsSQL = `WITH RECURSIVE heads AS (
	(SELECT h.aggregate_type, h.aggregate_id, h.id, h.status FROM %[1]s AS h
	 WHERE h.status IN (%[2]s) AND %[3]s
	 ORDER BY h.aggregate_type COLLATE "C", h.aggregate_id COLLATE "C", h.id
	 LIMIT 1)
	UNION ALL
	SELECT n.aggregate_type, n.aggregate_id, n.id, n.status FROM heads, LATERAL (
		SELECT h.aggregate_type, h.aggregate_id, h.id, h.status FROM %[1]s AS h
		WHERE h.status IN (%[2]s)
		  AND (h.aggregate_type COLLATE "C", h.aggregate_id COLLATE "C") > (heads.aggregate_type, heads.aggregate_id)%[4]s
		ORDER BY h.aggregate_type COLLATE "C", h.aggregate_id COLLATE "C", h.id
		LIMIT 1) AS n
), c AS (
	SELECT o.id FROM heads JOIN %[1]s AS o ON o.id = heads.id
	WHERE heads.status = 0 AND o.status = 0 AND (o.next_retry_at IS NULL OR o.next_retry_at <= now())%[6]s
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED
), u AS (
%[5]s
)
SELECT u.*, v.visited FROM (SELECT CASE WHEN (SELECT count(*) FROM c) < $1 THEN (SELECT count(*) FROM heads) END AS visited) AS v
	LEFT JOIN u ON true`
)

func indent(s string) string { return "\t" + strings.ReplaceAll(s, "\n", "\n\t") }

// headIndexSQL tells whether the table has the head index, by name.
const headIndexSQL = `SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
	WHERE i.indrelid = to_regclass($1) AND c.relname = $2)`

// orderedFor returns what the Store knows about ordered claims on its table,
// finding out on first use.
func (s *Store) orderedFor(ctx context.Context, q *queries) (*orderedState, error) {
	s.mu.Lock()
	st := s.ordered
	s.mu.Unlock()
	if st != nil {
		return st, nil
	}
	parts, _ := splitTable(s.cfg.table) // validated by New
	var ok bool
	if err := s.pool.QueryRow(ctx, headIndexSQL, s.ident, sqlcore.SideName(parts[len(parts)-1], headIndexSuffix, 63)).
		Scan(&ok); err != nil {
		return nil, fmt.Errorf("pgstore: claim: look for the head index: %w", err)
	}
	st = &orderedState{headIndex: ok, q: buildOrderedQueries(s.ident, q, s.asyncFilter()),
		slotQ: buildSlotOrderedQueries(s.ident, q, s.asyncFilter()),
		runs:  buildRunsQueries(s.ident, q, ok, s.asyncFilter())}
	s.mu.Lock()
	s.ordered = st
	s.mu.Unlock()
	return st, nil
}

// claimHeads claims heads only (see the comment at the top of this file).
func (s *Store) claimHeads(ctx context.Context, q *queries, p outbox.ClaimParams) (*outbox.Claim, error) {
	return s.claimHeadsOf(ctx, q, p, false)
}

// claimHeadsOf is claimHeads; with slot, only heads of the aggregates of
// the slot p.Slot (of p.Slots).
func (s *Store) claimHeadsOf(ctx context.Context, q *queries, p outbox.ClaimParams, slot bool) (*outbox.Claim, error) {
	st, err := s.orderedFor(ctx, q)
	if err != nil {
		return nil, err
	}
	lease, mp := p.Lease.Microseconds(), payloadLimit(p.MaxPayload)
	claim := &outbox.Claim{}
	policy := 0
	if p.BlockOnDead {
		policy = 1
	}
	oq := st.q[policy]
	var extra []any // the slot's parameters, after the others
	if slot {
		oq, extra = st.slotQ[policy], []any{p.Slots, p.Slot}
	}
	args := func(a ...any) []any { return append(a, extra...) }
	if !st.headIndex {
		return s.claimOrderedByStatus(ctx, q, st, oq, p, extra)
	}
	s.mu.Lock()
	aggs, cur := st.aggs[policy], s.cursor
	s.mu.Unlock()
	if aggs > 0 && aggs <= int64(p.Limit) {
		// Few aggregates: the skip scan alone, from the first aggregate.
		var visited pgtype.Int8
		if err := s.claimRows(ctx, claim, q, oq.headsFrom, []any{&visited}, mp, args(p.Limit, lease, "", "")...); err != nil {
			return nil, err
		}
		s.setAggregates(st, policy, visited)
		sortClaim(claim)
		return claim, nil
	}

	var beyond bool
	if err := s.claimRows(ctx, claim, q, oq.walk, []any{&beyond}, mp, args(p.Limit, lease, orderedWindow(p.Limit))...); err != nil {
		return nil, err
	}
	if n := claimSize(claim); n < p.Limit && beyond {
		from := &outbox.Claim{}
		var visitedFrom, visitedUpTo pgtype.Int8
		if err := s.claimRows(ctx, from, q, oq.headsFrom, []any{&visitedFrom}, mp, args(p.Limit-n, lease, cur.aggType, cur.aggID)...); err != nil {
			return nil, err
		}
		upTo := &outbox.Claim{}
		if m := claimSize(from); n+m < p.Limit && cur.set {
			if err := s.claimRows(ctx, upTo, q, oq.headsUpTo, []any{&visitedUpTo}, mp, args(p.Limit-n-m, lease,
				cur.aggType, cur.aggID)...); err != nil {
				return nil, err
			}
		}
		// The skip scan went through every aggregate when neither part
		// filled the claim (without a cursor, the first part is all of them).
		if cur.set {
			visitedFrom.Int64 += visitedUpTo.Int64
			visitedFrom.Valid = visitedFrom.Valid && visitedUpTo.Valid
		}
		s.setAggregates(st, policy, visitedFrom)
		// The round robin goes on after the last aggregate the skip scan
		// claimed from, in its last pass.
		last := upTo
		if claimSize(upTo) == 0 {
			last = from
		}
		if next, ok := lastAggregate(last); ok {
			s.mu.Lock()
			s.cursor = next
			s.mu.Unlock()
		}
		for _, c := range []*outbox.Claim{from, upTo} {
			claim.Messages = append(claim.Messages, c.Messages...)
			claim.Malformed = append(claim.Malformed, c.Malformed...)
		}
	}
	sortClaim(claim)
	return claim, nil
}

// claimOrderedByStatus claims heads on a table without the head index: the
// heads among a window of the first due rows, in the order of the (status,
// next_retry_at) index; when that gave none and the window was full, the
// heads among all pending rows (byStatusAll: a claim then reads the
// backlog, which happens when rows held back fill the front).
//
// It does not read the backlog when the window gave fewer heads than the
// limit but some: with few aggregates, most of them in flight, every claim
// would read it all for heads that are not there (three ordered relays over
// 100 aggregates of 1,000 sent rows each ran such a claim 652 times, 202 ms
// each, in one drain). Heads further on come to the front as the rows
// before them are sent. And when a read of the whole backlog found no head,
// the next headsPause claims of the same kind (of any aggregate, or of a
// slot's) read only the window: each would read it all again for nothing
// while the rows in flight are published. A backlog whose front is held
// back for good (dead rows under DeadBlocks) still gives heads further on
// to every claim, since the read that finds them pauses nothing.
func (s *Store) claimOrderedByStatus(ctx context.Context, q *queries, st *orderedState, oq orderedQueries, p outbox.ClaimParams,
	extra []any) (*outbox.Claim, error) {
	lease, mp := p.Lease.Microseconds(), payloadLimit(p.MaxPayload)
	claim := &outbox.Claim{}
	var beyond bool
	if err := s.claimRows(ctx, claim, q, oq.byStatus, []any{&beyond}, mp, append([]any{p.Limit, lease, orderedWindow(p.Limit)}, extra...)...); err != nil {
		return nil, err
	}
	if claimSize(claim) > 0 || !beyond {
		sortClaim(claim)
		return claim, nil
	}
	paused := &st.headsPaused[0]
	if len(extra) > 0 { // a slot's heads
		paused = &st.headsPaused[1]
	}
	if paused.Skip() {
		return claim, nil
	}
	if err := s.claimRows(ctx, claim, q, oq.byStatusAll, []any{&beyond}, mp, append([]any{p.Limit, lease, int64(math.MaxInt64)}, extra...)...); err != nil {
		return nil, err
	}
	if claimSize(claim) == 0 {
		paused.Start(headsPause)
	}
	sortClaim(claim)
	return claim, nil
}

// headsPause is how many heads claims on a table without the head index
// read only their window after one that read the whole backlog and found
// no head (claimOrderedByStatus).
const headsPause = 16

// setAggregates records how many aggregates a skip scan that went through
// all of them visited; visited is NULL when the skip scan filled the claim.
func (s *Store) setAggregates(st *orderedState, policy int, visited pgtype.Int8) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st.aggs[policy] = 0
	if visited.Valid {
		st.aggs[policy] = visited.Int64
	}
}

// lastAggregate returns the greatest aggregate of a claim in byte order (the
// head index's "C" collation), as the next cursor.
func lastAggregate(c *outbox.Claim) (orderedCursor, bool) {
	var cur orderedCursor
	consider := func(m *outbox.Message) {
		if !cur.set || cmp.Or(strings.Compare(m.AggregateType, cur.aggType), strings.Compare(m.AggregateID, cur.aggID)) > 0 {
			cur = orderedCursor{set: true, aggType: m.AggregateType, aggID: m.AggregateID}
		}
	}
	for _, m := range c.Messages {
		consider(m)
	}
	for _, bad := range c.Malformed {
		consider(bad.Message)
	}
	return cur, cur.set
}

// claimRows runs a claim statement with args and then maxPayload, its last
// parameter (see payloadColumn), and adds its rows to claim. With flags,
// every result row ends with those columns, scanned into flags (the same in
// every row), and a row whose id is NULL carries only the flags.
func (s *Store) claimRows(ctx context.Context, claim *outbox.Claim, q *queries, sql string, flags []any,
	maxPayload int32, args ...any) error {
	rows, err := s.pool.Query(ctx, s.m.SQL(sql), append(args, maxPayload)...)
	if err == nil {
		err = scanClaimRows(rows, q, maxPayload, claim, flags...)
	}
	if err != nil {
		return fmt.Errorf("pgstore: claim: %w", err)
	}
	return nil
}

// sortClaim puts a claim's rows in id order.
func sortClaim(c *outbox.Claim) {
	slices.SortFunc(c.Messages, func(a, b *outbox.Message) int { return cmp.Compare(a.RowID, b.RowID) })
	slices.SortFunc(c.Malformed, func(a, b outbox.MalformedRow) int {
		return cmp.Compare(a.Message.RowID, b.Message.RowID)
	})
}
