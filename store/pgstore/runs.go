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
// rows of a few aggregates: byAggregate), reads, for each aggregate among
// them, every pending (or dead, when dead rows block) row up to its last
// candidate in the statement's snapshot, and keeps a candidate only when
// every one of those rows before it is a candidate too: each aggregate
// gives a run, a prefix of its pending rows. (byAggregate reads those rows
// before it locks, chooses candidates that pass the rule, and then keeps
// each aggregate's candidates up to the first the lock skipped.) Why that
// is safe, with concurrent claims and acknowledgements, is in
// docs/ordering.md ("Runs: why a claim cannot skip a row"). The rows
// locked and not kept are released when the statement commits. The rows of
// outbox.ClaimParams.Chain (the relay's batches in flight) count as
// candidates for that rule without being claimed again, so a claim can take
// the rows that follow them (chained runs; the relay publishes those only
// after it got the earlier ones confirmed).
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

// inSlot is the condition "row o's aggregate is in the slot": slotHash,
// with Slots as parameter n, equals parameter n+1. It is written inside
// COALESCE (NULL, no aggregate, is false either way) so that the planner
// estimates it at half the rows rather than an equality's 1 in 200: with
// that, a custom plan (the first five executions of a statement on a
// connection) saw a few hundred rows of the slot in the whole table, and
// sorted a scan of all of it instead of walking the pending index.
func inSlot(n int) string {
	return fmt.Sprintf("COALESCE(%s = $%d::bigint, false)", strings.Replace(slotHash, "$6", fmt.Sprintf("$%d", n), 1), n+1)
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
	// Candidates chosen by aggregate (byAggregate) take the slot's
	// aggregates first.
	head = strings.Replace(head, aggsOrder, "OVER (ORDER BY "+slotHash+" IS DISTINCT FROM $7::bigint, min(o.id))", 1)
	sel = sel[:strings.LastIndex(sel, ")")]
	mine := strings.Replace(sel, "\n\tORDER BY o.id", "\n\t  AND "+inSlot(6)+"\n\tORDER BY o.id", 1)
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
		// The rest after the candidates.
		rest := fmt.Sprintf(`, span AS (
	SELECT aggregate_type, aggregate_id, max(id) AS hi, array_agg(id ORDER BY id) AS ids
	FROM cand GROUP BY aggregate_type, aggregate_id
), pend AS (
	SELECT s.aggregate_type, s.aggregate_id, p.id,
		COALESCE(s.ids[width_bucket(p.id, s.ids)] = p.id, false) AS mine
	FROM span AS s, LATERAL (
		SELECT h.id FROM %[1]s AS h
		WHERE h.aggregate_type%[3]s = s.aggregate_type AND h.aggregate_id%[3]s = s.aggregate_id
		  AND h.status IN (%[2]s) AND h.id <= s.hi
		ORDER BY h.aggregate_type%[3]s, h.aggregate_id%[3]s, h.id) AS p
), run AS (
	SELECT p.id, p.mine,
		bool_and(p.mine OR COALESCE(($5::bigint[])[width_bucket(p.id, $5::bigint[])] = p.id, false)) OVER w AS ok,
		count(*) FILTER (WHERE p.mine) OVER w AS n
	FROM pend AS p
	WINDOW w AS (PARTITION BY p.aggregate_type, p.aggregate_id ORDER BY p.id)
)`, table, blocking, collate) + runsUpdate(table, q, "ok AND mine AND n <= greatest($1 / 4, 1)")
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
		out[i].fromCursor = payloadParam(fromCursor+rest+flagsSelect(false, false), 6)
		out[i].slotFromCursor = payloadParam(slotCandidates(fromCursor, async)+rest+flagsSelect(true, false), 8)
		if headIndex {
			byStatus := fmt.Sprintf(statusWindow+statusCandSQL, table, async, "SELECT id FROM due UNION ALL SELECT id FROM fresh")
			out[i].byStatus = payloadParam(byStatus+rest+flagsSelect(false, false), 6)
			out[i].slotByStatus = payloadParam(slotCandidates(byStatus, async)+rest+flagsSelect(true, false), 8)
			continue
		}
		byAgg := byAggregate(table, async, blocking)
		aggRest := byAggregateRest + runsUpdate(table, q, "ok")
		out[i].byStatus = payloadParam(strings.ReplaceAll(byAgg+aggRest+flagsSelect(false, true), aggsParam, "$6"), 7)
		out[i].slotByStatus = payloadParam(strings.ReplaceAll(slotCandidates(byAgg, async)+aggRest+flagsSelect(true, true), aggsParam, "$8"), 9)
	}
	return out
}

// runsUpdate is the CTE u of a runs claim: it leases the rows of run that
// keep says to keep, and the candidates with no aggregate, and returns
// them.
func runsUpdate(table string, q *queries, keep string) string {
	return fmt.Sprintf(`, u AS (
	UPDATE %[1]s AS o
	SET retry_count = %[2]s,
		next_retry_at = now() + $2::bigint * interval '1 microsecond',
		updated_at = now()
	WHERE o.id = ANY (ARRAY(SELECT id FROM run WHERE %[3]s
		UNION ALL SELECT id FROM cand WHERE aggregate_type IS NULL OR aggregate_id IS NULL))
	RETURNING %[4]s
)
`, table, nextAttempt("o.retry_count"), keep, q.columnList)
}

// byAggregateRest is the rest of a runs claim after byAggregate's
// candidates. lead applied the prefix rule to the picks, in the statement's
// snapshot, before they were locked; what is left is the rows the lock
// skipped (held by another claim, or no longer due): each aggregate keeps
// its picks up to the first that is not a candidate. held and marks are
// materialized so that the sort of run carries no array and no candidate
// is looked up once per pick.
const byAggregateRest = `, held AS MATERIALIZED (
	SELECT array_agg(id ORDER BY id) AS ids FROM cand
), marks AS MATERIALIZED (
	SELECT p.id, p.ord, COALESCE(c.ids[width_bucket(p.id, c.ids)] = p.id, false) AS locked
	FROM picks AS p, held AS c
), run AS (
	SELECT id, bool_and(locked) OVER (PARTITION BY ord ORDER BY id) AS ok FROM marks
)`

// flagsSelect is the end of a runs claim: the claimed rows, each with the
// flags, or one row of flags alone when nothing was claimed. full says that
// the candidates filled their limit, so more due rows may lie beyond them;
// with slot, slot_full that the slot's rows filled it (slotCandidates).
// Candidates chosen by aggregate (byAgg) add supply and aggs: the rows the
// chosen aggregates offered and how many aggregates were read
// (claimByAggregate), and their full counts the window too (windowFull).
func flagsSelect(slot, byAgg bool) string {
	full := "count(*) >= $1 AS full"
	if byAgg {
		full = windowFull
	}
	names := "f.full"
	if slot {
		full += ", (SELECT count(*) FROM mine) >= $1 AS slot_full"
		names += ", f.slot_full"
	}
	if byAgg {
		full += ", (SELECT count(*) FROM supply) AS supply, (SELECT count(*) FROM aggs) AS aggs"
		names += ", f.supply, f.aggs"
	}
	return "SELECT u.*, " + names + " FROM (SELECT " + full + " FROM cand) AS f LEFT JOIN u ON true"
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
	byAgg := !ix.pending && !st.headIndex
	lease, mp := p.Lease.Microseconds(), payloadLimit(p.MaxPayload)
	full := false
	slotFull := false // with a slot: its rows filled the candidates (it has more)
	var supply, aggs int64
	take := func(limit int, lo, hi int64, more ...any) (*outbox.Claim, error) {
		claim := &outbox.Claim{}
		var f, sf bool
		flags := []any{&f}
		if p.Slots > 1 {
			flags = append(flags, &sf)
		}
		if byAgg {
			flags = append(flags, &supply, &aggs)
		}
		if err := s.claimRows(ctx, claim, q, sql, flags, mp, append(append([]any{limit, lease, lo, hi}, args...), more...)...); err != nil {
			return nil, err
		}
		full, slotFull = full || f, slotFull || sf
		return claim, nil
	}
	var claim *outbox.Claim
	switch {
	case ix.pending:
		claim, err = s.fromCursor(s.cursorFor(p), p.Limit, func(limit int, lo, hi int64) (*outbox.Claim, error) { return take(limit, lo, hi) })
	case byAgg:
		claim, err = st.claimByAggregate(p.Limit, func(limit, k int) (*outbox.Claim, int64, int64, error) {
			c, err := take(limit, 0, math.MaxInt64, k)
			return c, supply, aggs, err
		})
	default:
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

// claimByAggregate runs a claim whose candidates are chosen by aggregate
// (byAggregateSQL): take claims up to limit rows reading k aggregates,
// and reports the rows those offered (supply) and how many it read.
//
// Each aggregate read costs its pending rows and its entries in
// (aggregate_type, aggregate_id), so a claim reads about as many as it
// needs to fill its limit: the limit over the rows an aggregate offered
// in the last claim, at least enough for full runs. When a claim reads
// too few (the backlog's shape changed), it goes again once for the rest
// with the new figure, before the caller turns to the heads claim. A
// claim's aggregates already taken may come first again, each now
// blocked by its own leased rows, so the second read counts them in.
func (st *orderedState) claimByAggregate(limit int, take func(limit, k int) (*outbox.Claim, int64, int64, error)) (*outbox.Claim, error) {
	k := aggregatesToRead(limit, st.perAggregate.Load())
	claim, supply, aggs, err := take(limit, k)
	if err != nil {
		return nil, err
	}
	st.observe(supply, aggs)
	n := claimSize(claim)
	if n >= limit || supply >= int64(limit) || aggs < int64(k) || k >= limit {
		// Full; or short for another reason than too few aggregates read
		// (the lock skipped rows, or the window had no more aggregates).
		return claim, nil
	}
	more, _, _, err := take(limit-n, k+aggregatesToRead(limit-n, st.perAggregate.Load()))
	if err != nil {
		return claim, nil
	}
	claim.Messages = append(claim.Messages, more.Messages...)
	claim.Malformed = append(claim.Malformed, more.Malformed...)
	return claim, nil
}

// observe records what a claim by aggregate found: supply rows offered by
// aggs aggregates, in thousandths of a row per aggregate.
func (st *orderedState) observe(supply, aggs int64) {
	if aggs > 0 {
		st.perAggregate.Store(max(supply*1000/aggs, 1))
	}
}

// aggregatesToRead is how many aggregates a claim by aggregate of limit
// rows reads when each offered perAggregate/1000 rows in the last claim (0:
// not known yet): enough for the limit with a quarter to spare, at least
// enough for full runs (a run is at most a quarter of the limit), at most
// the limit.
func aggregatesToRead(limit int, perAggregate int64) int {
	runCap := max(limit/4, 1)
	least := (limit + runCap - 1) / runCap
	if perAggregate <= 0 || perAggregate >= int64(runCap)*1000 {
		return least
	}
	k := int((int64(limit)*1250 + perAggregate - 1) / perAggregate)
	return min(max(k, least), limit)
}

// windowFull is the flag "full" of a runs claim whose candidates are
// chosen by aggregate (byAggregate): the candidates filled the limit,
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

// byAggregate returns the candidates of a runs claim on a table with
// neither the pending index nor the head index: $1 limit, $3 and $4 the
// ids (lo, hi] of the claim cursor, $5 the chain, aggsParam how many
// aggregates to read; blocking is the statuses that hold an aggregate
// back.
//
// Such a table finds an aggregate's rows only through (aggregate_type,
// aggregate_id), which holds every row the table keeps of it, sent ones
// too. So a window of the (status, next_retry_at) index, as in the
// unordered claim (claimStatus), only chooses aggregates, by their first
// row in it, and hist reads the pending (and blocking dead) rows of all of
// them in one scan: PostgreSQL ANDs their entries in (aggregate_type,
// aggregate_id) with one bitmap of the status index, where a scan per
// aggregate built that bitmap once per aggregate. The scan takes every
// pair of the aggregates' types and ids; the join with aggs keeps the
// aggregates chosen. The candidates are each aggregate's rows that pass
// the prefix rule in hist (every earlier row due, or in the chain), up to
// the run's cap, aggregate by aggregate until the limit; byAggregateRest
// drops what the lock skipped. A row with no aggregate in the window is a
// candidate as before.
func byAggregate(table, async, blocking string) string {
	window := strings.NewReplacer("SELECT w.id FROM", "SELECT w.id, w.aggregate_type, w.aggregate_id FROM",
		"greatest(4 * $1, 256)", aggregateWindow).Replace(statusWindow)
	return fmt.Sprintf(window+byAggregateSQL+statusCandSQL, table, async,
		"SELECT id FROM picks UNION ALL SELECT id FROM win WHERE aggregate_type IS NULL OR aggregate_id IS NULL", blocking)
}

// aggsOrder is the order in which byAggregateSQL chooses aggregates: by
// their first row in the window. slotCandidates puts the slot's first.
const aggsOrder = "OVER (ORDER BY min(o.id))"

// aggsParam stands for the parameter of a byAggregate statement that says
// how many aggregates it reads; buildRunsQueries numbers it.
const aggsParam = "$aggs"

// byAggregateSQL chooses the candidates by aggregate (byAggregate), after
// the window read with the rows' aggregates. lead is each aggregate's
// rows in id order, each with ok (every row of the aggregate up to it is
// due, or in the chain) and n (its place among those not in the chain);
// supply is the rows a run could take, picks the first of them up to the
// limit. %[1]s the table, %[4]s the blocking statuses.
const byAggregateSQL = `, win AS (
	SELECT * FROM due UNION ALL SELECT * FROM fresh
), aggs AS (
	SELECT o.aggregate_type, o.aggregate_id, row_number() ` + aggsOrder + ` AS ord FROM win AS o
	WHERE o.aggregate_type IS NOT NULL AND o.aggregate_id IS NOT NULL
	GROUP BY o.aggregate_type, o.aggregate_id
	ORDER BY ord
	LIMIT ` + aggsParam + `
), hist AS MATERIALIZED (
	SELECT h.id, h.aggregate_type, h.aggregate_id,
		h.status = 0 AND (h.next_retry_at IS NULL OR h.next_retry_at <= now()) AS due
	FROM %[1]s AS h
	WHERE h.aggregate_type = ANY (ARRAY(SELECT DISTINCT aggregate_type FROM aggs))
	  AND h.aggregate_id = ANY (ARRAY(SELECT aggregate_id FROM aggs))
	  AND h.status IN (%[4]s)
), lead AS (
	SELECT h.id, a.ord, h.chained,
		bool_and(h.due OR h.chained) OVER w AS ok,
		count(*) FILTER (WHERE NOT h.chained) OVER w AS n
	FROM (SELECT *, COALESCE(($5::bigint[])[width_bucket(id, $5::bigint[])] = id, false) AS chained FROM hist) AS h
	JOIN aggs AS a ON a.aggregate_type = h.aggregate_type AND a.aggregate_id = h.aggregate_id
	WINDOW w AS (PARTITION BY a.ord ORDER BY h.id)
), supply AS (
	SELECT id, ord FROM lead WHERE ok AND NOT chained AND n <= greatest($1 / 4, 1)
), picks AS (
	SELECT id, ord FROM supply ORDER BY ord, id LIMIT $1
)`

// statusCandSQL locks the candidates of a runs claim from the (status,
// next_retry_at) index (byAggregate, or the window alone with the head
// index): %[1]s the table, %[2]s the async-commit filter, %[3]s the query
// of their ids.
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
