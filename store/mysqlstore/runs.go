package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxkit/outbox"
)

// An ordered claim hands out runs: for each aggregate, a prefix of its
// pending rows in id order, starting at its oldest pending row, none of
// whose rows has an earlier pending row (or dead row, when dead rows block)
// outside the claim. It runs in its one READ COMMITTED transaction (the
// store's, core.TxOptions):
//
//  1. the unordered claim's locking read (claimSQLs: the first due pending
//     rows, FOR UPDATE SKIP LOCKED), which locks the candidates;
//  2. a fresh, non-locking read of the pending (and, when dead rows block,
//     dead) rows of the candidates' aggregates, each up to its last
//     candidate (runsSQL);
//  3. per aggregate, the longest prefix of (2) that (1) locked is kept and
//     leased; the commit releases the locks of the rest, untouched.
//
// Why (2) is a statement of its own: InnoDB's locking reads see the latest
// committed version of each row, and its plain reads a snapshot. When a
// writer commits rows k and k+1 of an aggregate while (1) scans, (1) can
// pass row k while the writer still holds it (and skip it), then lock row
// k+1, committed by then (docs/guarantees.md, "Found and fixed: ordered
// claims on MySQL/MariaDB"). Under READ COMMITTED each statement reads a
// snapshot taken when it starts, and (2) starts after (1) returned: every
// transaction whose rows (1) locked had committed by then, with all of its
// rows, so row k is in (2) and, not locked by (1), ends the run before k+1.
// A row another claim holds (locked, or leased and so not due) or one in
// backoff is pending in (2) and not in (1): it ends its run too.
//
// Why not READ UNCOMMITTED, which would make (2) cheaper beside the
// acknowledgements (no snapshot to build): it can miss a row. InnoDB moves
// a row's entry in an index that leads with the status (the head index, or
// (status, next_retry_at)) by delete-marking the old entry and then
// inserting the new one, and a read of the latest versions that passes the
// new place before the insert and the old one after the delete-mark sees
// neither. A kill (pending to dead), an operator's retry (dead to pending)
// or, on the contract's index, a lease would then let the rows after it
// out first; runcheck's kills and retries showed it (docs/ordering.md,
// "Why not READ UNCOMMITTED"). A READ COMMITTED read builds each row's
// version from the table and does not miss it.
//
// When (1) came back full and (2) kept fewer rows than the limit, the
// candidates were mostly rows blocked behind an earlier row (a head in
// backoff, leased, or dead under DeadBlocks): a claim that stopped there
// would hand out nothing while the blocked rows fill the front of the
// backlog. So the claim then also takes heads the way ordered claims always
// did (ordered.go: a window of the due rows and a loose scan of the head
// index; on a table without it, the first rows of the aggregates in the
// backlog, heads.go), and runs (2) and (3) again over everything it locked.

// runCap is the most rows of one aggregate an ordered claim of limit rows
// keeps: a quarter of the limit, at least one, as on PostgreSQL. An
// aggregate with a deep backlog at the front of the table would otherwise
// fill every claim alone, published one broker round trip per message
// while the aggregates behind it wait; capped, the claim comes back short
// and the heads step fills it with the others. A cap on chained runs alone
// was not enough: a relay with one batch in flight (where the self-sizing
// relay starts) claims only after its batch settled, so its claims name no
// Chain, and two such relays took 50 rows of the hot aggregate in turns
// until it drained (e2e TestHotAggregateDoesNotStarveOthers, 300 of 300).
func runCap(limit int) int { return max(limit/4, 1) }

// lockedRow is a row an ordered claim locked, with its aggregate.
type lockedRow struct {
	id       int64
	agg      aggKey
	nullAgg  bool // aggregate_type or aggregate_id is NULL: a malformed row, its own run
	message  *outbox.Message
	malforms error // non-nil: the row goes to Claim.Malformed
}

// aggKey is an aggregate, compared byte for byte.
type aggKey struct{ typ, id string }

// runsSQL returns step (2) of an ordered claim for n aggregates: its
// parameters are the greatest id to read (the last candidate), then each
// aggregate's type and id, repeated runsParts times. Its rows are (id,
// aggregate_type, aggregate_id); keepRuns drops those of an aggregate past
// its own last candidate.
//
// With the head index it reads, per status and aggregate, one range of the
// index up to that id: the aggregate's pending (or dead) rows before it,
// which are the run's rows and whatever ends the run, never a sent row.
// Without it (a table with only the contract's indexes, whose
// (aggregate_type, aggregate_id) index would lead through every sent row an
// aggregate kept), it reads the contract's (status, next_retry_at) index,
// which InnoDB ends with the primary key: the rows never claimed up to the
// last candidate (one range), the other pending rows (leased, in backoff, due
// again: about what is in flight) and the dead rows, each checked against the
// aggregates after its primary key lookup. Either way the read is bounded by
// the rows in front of the claim (in flight, locked by other claims, waiting
// or dead), not by the sent rows the table keeps.
//
// The aggregates are a row-constructor IN list, not an OR of one condition
// per aggregate with its own bound: MySQL and MariaDB evaluate the OR again
// on every row the ranges return (a thousand terms for each of a thousand
// rows: 134 ms for a claim of 1,000 rows of 1,000 aggregates, against 13 ms
// for the IN list, which they search in a sorted array).
func (s *Store) runsSQL(info tableInfo, p outbox.ClaimParams, n int) string {
	t := s.table.quoted()
	in := "(h.aggregate_type, h.aggregate_id) IN (" + strings.TrimSuffix(strings.Repeat("(?, ?), ", n), ", ") + ")"
	blocking := "0"
	if p.BlockOnDead {
		blocking = "0, 2"
	}
	const cols = "SELECT h.id, h.aggregate_type, h.aggregate_id FROM "
	if info.headIndex != "" || info.statusIndex == "" || !info.pkID {
		force := ""
		if info.headIndex != "" {
			force = " FORCE INDEX (" + quoteIdent(info.headIndex) + ")"
		}
		return cols + t + " AS h" + force + " WHERE h.status IN (" + blocking + ") AND h.id <= ? AND " + in
	}
	force := " FORCE INDEX (" + quoteIdent(info.statusIndex) + ")"
	part := func(cond string) string {
		return cols + t + " AS h" + force + " WHERE " + cond + " AND h.id <= ? AND " + in
	}
	q := part("h.status = 0 AND h.next_retry_at IS NULL") + " UNION ALL " + part("h.status = 0 AND h.next_retry_at IS NOT NULL")
	if p.BlockOnDead {
		q += " UNION ALL " + part("h.status = 2")
	}
	return q
}

// runsParts is how many times runsSQL's statement repeats its parameters.
func runsParts(info tableInfo, p outbox.ClaimParams) int {
	if info.headIndex != "" || info.statusIndex == "" || !info.pkID {
		return 1
	}
	if p.BlockOnDead {
		return 3
	}
	return 2
}

// keepRuns runs steps (2) and (3) over the rows the claim locked and returns
// the rows to lease, in id order, at most limit.
func (s *Store) keepRuns(ctx context.Context, tx *sql.Tx, info tableInfo, p outbox.ClaimParams,
	locked map[int64]*lockedRow) ([]*lockedRow, error) {
	if s.afterLock != nil {
		s.afterLock()
	}
	last := map[aggKey]int64{} // each aggregate's last candidate
	var kept []*lockedRow
	for _, r := range locked {
		if r.nullAgg {
			kept = append(kept, r) // no aggregate to order by: decoding fails, the relay kills it
			continue
		}
		last[r.agg] = max(last[r.agg], r.id)
	}
	chained := chainSet(p.Chain)
	pending, ok, err := s.readFront(ctx, tx, info, p, locked, chained, last)
	if err == nil && !ok {
		pending, err = s.readRuns(ctx, tx, info, p, last)
	}
	if err != nil {
		return nil, err
	}
	kept = append(kept, runPrefixes(pending, locked, chained, p.Limit)...)
	slices.SortFunc(kept, func(a, b *lockedRow) int { return cmp.Compare(a.id, b.id) })
	// Cutting at an id keeps every run a prefix: a run's earlier rows have smaller ids.
	return kept[:min(len(kept), p.Limit)], nil
}

// readRuns is step (2): each aggregate's pending (and, when dead rows
// block, dead) rows up to its last candidate, read in chunks of aggregates.
func (s *Store) readRuns(ctx context.Context, tx *sql.Tx, info tableInfo, p outbox.ClaimParams,
	last map[aggKey]int64) (map[aggKey][]int64, error) {
	aggs := make([]aggKey, 0, len(last))
	for a := range last {
		aggs = append(aggs, a)
	}
	slices.SortFunc(aggs, func(a, b aggKey) int { return cmp.Or(cmp.Compare(a.typ, b.typ), cmp.Compare(a.id, b.id)) })
	pending := map[aggKey][]int64{}
	parts := runsParts(info, p)
	for lo := 0; lo < len(aggs); lo += s.chunk {
		chunk := aggs[lo:min(lo+s.chunk, len(aggs))]
		var hi int64
		var pairs []any
		for _, a := range chunk {
			pairs = append(pairs, a.typ, a.id)
			hi = max(hi, last[a])
		}
		var args []any
		for range parts {
			args = append(append(args, hi), pairs...)
		}
		if err := scanRuns(ctx, tx, s.sql(s.runsSQL(info, p, len(chunk))), args, last, pending); err != nil {
			return nil, fmt.Errorf("read runs: %w", err)
		}
	}
	return pending, nil
}

// scanRuns adds the rows of one chunk's statement to pending.
func scanRuns(ctx context.Context, tx *sql.Tx, query string, args []any, last map[aggKey]int64,
	pending map[aggKey][]int64) error {
	return queryRows(ctx, tx, query, args, func(rows *sql.Rows) error {
		var id int64
		var a aggKey
		if err := rows.Scan(&id, &a.typ, &a.id); err != nil {
			return err
		}
		if l, ok := last[a]; ok && id <= l {
			pending[a] = append(pending[a], id)
		}
		return nil
	})
}

// chainSet returns the ids of ClaimParams.Chain as a set.
func chainSet(ids []int64) map[int64]bool {
	set := make(map[int64]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// runPrefixes is step (3): per aggregate, the longest prefix of rows that
// the claim locked or that are in Chain (chained: held by this relay's
// batches in flight, which it publishes first: chained runs), keeping at
// most runCap of the locked ones.
func runPrefixes(pending map[aggKey][]int64, locked map[int64]*lockedRow, chained map[int64]bool, limit int) []*lockedRow {
	most := runCap(limit)
	var kept []*lockedRow
	for _, ids := range pending {
		slices.Sort(ids)
		n := 0
		for _, id := range ids {
			if r, ok := locked[id]; ok {
				if n >= most {
					break
				}
				kept, n = append(kept, r), n+1
				continue
			}
			if !chained[id] {
				break
			}
		}
	}
	return kept
}
