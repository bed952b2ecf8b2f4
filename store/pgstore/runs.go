package pgstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/outboxkit/outbox"
)

// Ordered claims of runs (see outbox.ClaimParams.Ordered).
//
// A runs claim is one statement: it locks candidates as the unordered claim
// does (the due pending rows in id order from the claim cursor, FOR UPDATE
// SKIP LOCKED; on a table with only the contract's indexes, the first due
// rows of a few aggregates: statusCandidates), reads, for each aggregate
// among them, every pending (or dead, when dead rows block) row up to its
// last candidate in the statement's snapshot, and keeps a candidate only
// when every one of those rows before it is a candidate too: each aggregate
// gives a run, a prefix of its pending rows. Why that is safe, with
// concurrent claims and acknowledgements, is in docs/ordering.md ("Runs:
// why a claim cannot skip a row"). The rows locked and not kept are
// released when the statement commits. The rows of outbox.ClaimParams.Chain
// (the relay's batches in flight) count as candidates for that rule without
// being claimed again, so a claim can take the rows that follow them
// (chained runs; the relay publishes those only after it got the earlier
// ones confirmed).
//
// A run is at most a quarter of the claim's limit (at least one row): an
// aggregate with a deep backlog at the front would otherwise fill every
// claim alone, and the relay would publish it one broker round trip per
// message while the aggregates behind it wait; capped, the claim comes back
// short and the heads claim below fills it with the others.
//
// Runs are taken from the first due rows, so an aggregate blocked at the
// front of the backlog (a row in backoff, a dead row, rows another relay
// leases) could fill the candidates and leave the claim short while other
// aggregates have heads further on. So when a runs claim comes back short
// and its candidates filled their limit, the claim goes on with the heads
// claim (ordered.go), which finds heads anywhere, aggregate by aggregate.
// Its rows are heads of aggregates the runs left alone: the runs' rows are
// leased when it runs, so it cannot take a row behind them.

// runsQueries are the runs claim statements, for one dead policy: $1
// limit, $2 lease µs, $3 and $4 the ids (lo, hi] of the claim cursor, $5
// the ids of ClaimParams.Chain (rows of the relay's batches in flight,
// which count as candidates for the prefix rule, though they are not
// claimed again), $6 the payload limit. Each returns the claimed columns plus "full" (the
// candidates filled their limit: more due rows may lie beyond them).
type runsQueries struct {
	fromCursor string // on Migrate's pending index, from the claim cursor
	byStatus   string // without it: from the (status, next_retry_at) index (indexes.go)
	// The same with a slot preference (ClaimParams.Slot): the candidates
	// are first the rows of the slot's aggregates, then the other rows up
	// to the limit. $6 is Slots, $7 the slot, $8 the payload limit. They
	// return one more flag after "full": mine filled the limit (slotFull).
	slotFromCursor string
	slotByStatus   string
}

// slotHash is the hash of the aggregate of row o, modulo $6 (Slots), that a
// slot preference takes its rows by: computed by the database, so the same
// for every relay of a table; NULL for a row with no aggregate, which then
// belongs to no slot.
const slotHash = `(hashtextextended(o.aggregate_type || '/' || o.aggregate_id, 0) & 9223372036854775807) % $6::bigint`

// slotRest is the rest of a runs claim after slotCandidates: the same,
// with the flag slotFull (mine filled the limit) after full.
func slotRest(rest string) string {
	return strings.Replace(rest, "SELECT u.*, f.full FROM (SELECT count(*) >= $1 AS full FROM cand) AS f",
		"SELECT u.*, f.full, f.slot_full FROM (SELECT count(*) >= $1 AS full, (SELECT count(*) FROM mine) >= $1 AS slot_full FROM cand) AS f", 1)
}

// slotCandidates turns the candidates' CTE cand (one locking SELECT, the
// rest of the statement after it) into two: mine, the slot's rows, and
// others, every other row up to what mine left of the limit, which the
// statement reads only when mine came back short (a LIMIT of 0 reads
// nothing). cand is both; the rest of the statement is the same. The
// async-commit filter stays in mine.
func slotCandidates(cand, async string) string {
	i := strings.Index(cand, "cand AS (")
	head, sel := cand[:i], cand[i+len("cand AS ("):]
	// Candidates chosen by aggregate (statusCandidates) take the slot's
	// aggregates first.
	head = strings.Replace(head, "\n\tORDER BY first\n", "\n\tORDER BY "+slotHash+" IS DISTINCT FROM $7::bigint, first\n", 1)
	sel = sel[:strings.LastIndex(sel, ")")]
	mine := strings.Replace(sel, "\n\tORDER BY o.id", "\n\t  AND "+slotHash+" = $7::bigint\n\tORDER BY o.id", 1)
	others := strings.Replace(sel, "\n\tORDER BY o.id", "\n\t  AND "+slotHash+" IS DISTINCT FROM $7::bigint\n\tORDER BY o.id", 1)
	if async != "" {
		others = strings.Replace(others, async, "", 1)
	}
	others = strings.Replace(others, "\n\tLIMIT $1\n", "\n\tLIMIT $1 - (SELECT count(*) FROM mine)\n", 1)
	return head + "mine AS (" + mine + "), others AS (" + others + "), cand AS (\n\tSELECT * FROM mine UNION ALL SELECT * FROM others\n)"
}

// buildRunsQueries builds the runs statements; headIndex says whether the
// table has the head index (the aggregates' pending rows are then read
// from it, in its "C" collation); async is the filter that turns off
// synchronous commit (WithAsyncCommit), or "".
func buildRunsQueries(table string, q *queries, headIndex bool, async string) [2]runsQueries {
	var out [2]runsQueries
	collate := ""
	if headIndex {
		collate = ` COLLATE "C"`
	}
	for i, blocking := range []string{"0", "0, 2"} {
		// The rest after the candidates: the same for both.
		rest := fmt.Sprintf(`, span AS (
	SELECT aggregate_type, aggregate_id, max(id) AS hi, array_agg(id ORDER BY id) AS ids
	FROM cand GROUP BY aggregate_type, aggregate_id
), pend AS (
	SELECT s.aggregate_type, s.aggregate_id, p.id,
		COALESCE(s.ids[width_bucket(p.id, s.ids)] = p.id, false) AS mine
	FROM span AS s, LATERAL (
		SELECT h.id FROM %[1]s AS h
		WHERE h.aggregate_type%[5]s = s.aggregate_type AND h.aggregate_id%[5]s = s.aggregate_id
		  AND h.status IN (%[2]s) AND h.id <= s.hi
		ORDER BY h.aggregate_type%[5]s, h.aggregate_id%[5]s, h.id) AS p
), run AS (
	SELECT p.id, p.mine,
		bool_and(p.mine OR COALESCE(($5::bigint[])[width_bucket(p.id, $5::bigint[])] = p.id, false)) OVER w AS ok,
		count(*) FILTER (WHERE p.mine) OVER w AS n
	FROM pend AS p
	WINDOW w AS (PARTITION BY p.aggregate_type, p.aggregate_id ORDER BY p.id)
), u AS (
	UPDATE %[1]s AS o
	SET retry_count = %[3]s,
		next_retry_at = now() + $2::bigint * interval '1 microsecond',
		updated_at = now()
	WHERE o.id = ANY (ARRAY(SELECT id FROM run WHERE ok AND mine AND n <= greatest($1 / 4, 1)
		UNION ALL SELECT id FROM cand WHERE aggregate_type IS NULL OR aggregate_id IS NULL))
	RETURNING %[4]s
)
SELECT u.*, f.full FROM (SELECT count(*) >= $1 AS full FROM cand) AS f LEFT JOIN u ON true`,
			table, blocking, nextAttempt("o.retry_count"), q.columnList, collate)
		// Membership (a row of pend among the candidates, or in Chain) is
		// a binary search of a sorted array (width_bucket), not a join nor
		// = ANY: once pgx's prepared statement switches to PostgreSQL's
		// generic plan, whose estimate for LIMIT $1 is a few rows, the
		// planner put a join of pend and cand inside the loop over the
		// aggregates (a scan of every candidate per aggregate: 400 ms of
		// a 500 ms claim of 1,000 rows), and = ANY of a parameter is a
		// linear scan of the whole Chain per row. An element that is not
		// found indexes NULL (or another id), so a row is counted in only
		// when it is there.
		//
		// ANY (ARRAY(...)) keeps the planner off a hash join of the whole
		// table with the kept ids; a row with no aggregate (malformed) is
		// its own run, so that it is claimed and killed.
		fromCursor := fmt.Sprintf(`WITH cand AS (
	SELECT o.id, o.aggregate_type, o.aggregate_id FROM %[1]s AS o
	WHERE o.status = 0 AND (o.next_retry_at IS NULL OR o.next_retry_at <= now())
	  AND o.id > $3 AND o.id <= $4%[2]s
	ORDER BY o.id
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)`, table, async)
		out[i].fromCursor = payloadParam(fromCursor+rest, 6)
		out[i].slotFromCursor = payloadParam(slotCandidates(fromCursor, async)+slotRest(rest), 8)
		byStatus, statusRest, slotStatusRest := statusCandidates(table, async, headIndex), rest, slotRest(rest)
		if !headIndex {
			statusRest = strings.Replace(statusRest, "count(*) >= $1 AS full", windowFull, 1)
			slotStatusRest = strings.Replace(slotStatusRest, "count(*) >= $1 AS full", windowFull, 1)
		}
		out[i].byStatus = payloadParam(byStatus+statusRest, 6)
		out[i].slotByStatus = payloadParam(slotCandidates(byStatus, async)+slotStatusRest, 8)
	}
	return out
}

// claimRuns claims runs (see the top of this file).
func (s *Store) claimRuns(ctx context.Context, q *queries, p outbox.ClaimParams) (*outbox.Claim, error) {
	st, err := s.orderedFor(ctx, q)
	if err != nil {
		return nil, err
	}
	ix, err := s.indexesFor(ctx)
	if err != nil {
		return nil, err
	}
	sql, args := runsStatement(st, ix, p)
	lease, mp := p.Lease.Microseconds(), payloadLimit(p.MaxPayload)
	full := false
	slotFull := false // with a slot: its rows filled the candidates (it has more)
	take := func(limit int, lo, hi int64) (*outbox.Claim, error) {
		claim := &outbox.Claim{}
		var f, sf bool
		flags := []any{&f}
		if p.Slots > 1 {
			flags = append(flags, &sf)
		}
		if err := s.claimRows(ctx, claim, q, sql, flags, mp, append([]any{limit, lease, lo, hi}, args...)...); err != nil {
			return nil, err
		}
		full, slotFull = full || f, slotFull || sf
		return claim, nil
	}
	var claim *outbox.Claim
	if ix.pending {
		claim, err = s.fromCursor(s.cursorFor(p), p.Limit, take)
	} else {
		claim, err = take(p.Limit, 0, math.MaxInt64)
	}
	if err != nil {
		return nil, err
	}
	if claimSize(claim) >= p.Limit || !full {
		sortClaim(claim)
		return claim, nil
	}
	if slotFull {
		// The slot's rows filled the candidates and are held back: the
		// slot's heads first. Then heads of any aggregate only when the
		// slot gave nothing, so that a slot no live relay has (a view out
		// of date, until the next heartbeats) is not left behind: heads of
		// other slots taken in every claim would keep their relays'
		// candidates blocked behind this relay's batches.
		err := addHeads(claim, p, func(hp outbox.ClaimParams) (*outbox.Claim, error) { return s.claimHeadsOf(ctx, q, hp, true) })
		if err != nil {
			return nil, err
		}
		if claimSize(claim) > 0 {
			sortClaim(claim)
			return claim, nil
		}
	}
	// Short, with more due rows beyond the candidates: heads from anywhere.
	if err := addHeads(claim, p, func(hp outbox.ClaimParams) (*outbox.Claim, error) { return s.claimHeads(ctx, q, hp) }); err != nil {
		return nil, err
	}
	sortClaim(claim)
	return claim, nil
}

// windowFull is the flag "full" of a runs claim whose candidates are
// chosen by aggregate (statusCandidates): the candidates filled the limit,
// or the window was full, so that more due rows, of other aggregates, may
// lie beyond it. A short claim then goes on with the heads claim, as when
// the candidates were the window's first rows.
const windowFull = "(count(*) >= $1 OR (SELECT count(*) FROM win) >= " + aggregateWindow + ") AS full"

// aggregateWindow is the size of the window that candidates chosen by
// aggregate come from: the limit (at least 256), where the unordered claim
// reads four times that. A claim takes at most the limit's worth of
// aggregates, so more rows would only be grouped and sorted to be passed
// over (a fifth of such a claim's time, for 1,000 rows of 5,000
// aggregates).
const aggregateWindow = "greatest($1, 256)"

// statusCandidates returns the candidates of a runs claim on a table
// without the pending index: $1 limit, $3 and $4 the ids (lo, hi] of the
// claim cursor. They come, as in the unordered claim (claimStatus), from a
// window of the (status, next_retry_at) index: the rows due again, then the
// rows never claimed. They need not be the first due rows in id order,
// which the prefix rule does not need.
//
// With the head index, the candidates are the window's first rows. Without
// it, the runs claim reads the earlier rows of each candidate's aggregate
// through (aggregate_type, aggregate_id), which holds every row the table
// keeps of it, sent ones too, so each aggregate costs what its history
// costs. There the window only chooses aggregates, by their first row in
// it, and the candidates are the first due rows of each, up to the run's
// cap, aggregate by aggregate until the limit: a claim reads a few
// histories for a whole batch, where one candidate per aggregate (the
// shape of a backlog spread over many aggregates) read one history per
// row. A row with no aggregate in the window is a candidate as before.
func statusCandidates(table, async string, headIndex bool) string {
	if headIndex {
		return fmt.Sprintf(statusWindow+statusCandSQL, table, async, "SELECT id FROM due UNION ALL SELECT id FROM fresh")
	}
	window := strings.NewReplacer("SELECT w.id FROM", "SELECT w.id, w.aggregate_type, w.aggregate_id FROM",
		"greatest(4 * $1, 256)", aggregateWindow).Replace(statusWindow)
	return fmt.Sprintf(window+byAggregateSQL+statusCandSQL, table, async,
		"SELECT id FROM picks UNION ALL SELECT id FROM win WHERE aggregate_type IS NULL OR aggregate_id IS NULL")
}

// byAggregateSQL chooses the candidates by aggregate (statusCandidates),
// after the window read with the rows' aggregates, once. picks reads the
// aggregates in the order of aggs and stops at the limit: a nested loop
// over them, one (aggregate_type, aggregate_id) range each, as many as it
// needs. cand checks again that the rows it locks are due.
const byAggregateSQL = `, win AS (
	SELECT * FROM due UNION ALL SELECT * FROM fresh
), aggs AS (
	SELECT o.aggregate_type, o.aggregate_id, min(o.id) AS first FROM win AS o
	WHERE o.aggregate_type IS NOT NULL AND o.aggregate_id IS NOT NULL
	GROUP BY o.aggregate_type, o.aggregate_id
	ORDER BY first
	LIMIT $1
), picks AS (
	SELECT r.id FROM aggs AS a, LATERAL (
		SELECT h.id FROM %[1]s AS h
		WHERE h.aggregate_type = a.aggregate_type AND h.aggregate_id = a.aggregate_id
		  AND h.status = 0 AND (h.next_retry_at IS NULL OR h.next_retry_at <= now())
		ORDER BY h.id
		LIMIT greatest($1 / 4, 1)) AS r
	LIMIT $1
)`

// statusCandSQL locks the candidates of statusCandidates: %[1]s the table,
// %[2]s the async-commit filter, %[3]s the query of their ids.
const statusCandSQL = `, cand AS (
	SELECT o.id, o.aggregate_type, o.aggregate_id FROM %[1]s AS o
	WHERE o.id = ANY (ARRAY(%[3]s))
	  AND o.status = 0 AND (o.next_retry_at IS NULL OR o.next_retry_at <= now())
	  AND o.id > $3 AND o.id <= $4%[2]s
	ORDER BY o.id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED
)`

// runsStatement returns the runs claim statement for p on a table with
// the indexes ix, and its arguments after the limit, the lease and the
// cursor's range: the chain, sorted for the statement's binary search, and
// with a slot the slot's parameters.
func runsStatement(st *orderedState, ix tableIndexes, p outbox.ClaimParams) (string, []any) {
	policy := 0
	if p.BlockOnDead {
		policy = 1
	}
	rq := st.runs[policy]
	chain := slices.Clone(p.Chain)
	if chain == nil {
		chain = []int64{}
	}
	slices.Sort(chain)
	switch {
	case p.Slots > 1 && ix.pending:
		return rq.slotFromCursor, []any{chain, p.Slots, p.Slot}
	case p.Slots > 1:
		return rq.slotByStatus, []any{chain, p.Slots, p.Slot}
	case ix.pending:
		return rq.fromCursor, []any{chain}
	}
	return rq.byStatus, []any{chain}
}

// addHeads adds to claim, up to p.Limit, the heads that heads takes. The
// runs stand if it fails: it returns the error only when claim is empty.
func addHeads(claim *outbox.Claim, p outbox.ClaimParams, heads func(outbox.ClaimParams) (*outbox.Claim, error)) error {
	n := claimSize(claim)
	hp := p
	hp.Limit = p.Limit - n
	h, err := heads(hp)
	if err != nil {
		if n == 0 {
			return err
		}
		return nil
	}
	claim.Messages = append(claim.Messages, h.Messages...)
	claim.Malformed = append(claim.Malformed, h.Malformed...)
	return nil
}
