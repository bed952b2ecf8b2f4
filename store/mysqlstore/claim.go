package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/rowcheck"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// Claim takes up to p.Limit due pending rows in id order that no other
// relay holds, counts the attempt (retry_count + 1, returned as
// Message.Attempt) and leases them until the database's UTC now + p.Lease,
// in one short READ COMMITTED transaction (the store's; runs.go says why
// not READ UNCOMMITTED): SELECT ... ORDER BY id LIMIT n FOR UPDATE SKIP
// LOCKED of the rows, then one UPDATE of their ids, then COMMIT. The
// attempt is durable before Claim returns, and no transaction stays open
// while the relay publishes.
//
// When the table has an index on (status, id), the SELECT is forced onto
// it: it then walks pending rows in id order and locks only the rows it
// takes. Without one (a hand-made table), MySQL may sort every due row and
// keep them all locked until the commit, so concurrent claims wait for each
// other's short transactions instead of running side by side; Migrate adds
// the index.
//
// With p.Ordered it claims runs, as [outbox.ClaimParams.Ordered] says
// (runs.go); with p.Slots above 1 it looks first at the rows of the
// aggregates whose CRC32(CONCAT(aggregate_type, '/', aggregate_id)) MOD
// p.Slots is p.Slot (slotSQLs, slotPickSQL), and keeps what it would keep
// without them.
// Rows that cannot be decoded, and rows whose retry_count reached the most
// attempts an INT counts (2147483647), come back in Claim.Malformed, each
// error naming the row; a NULL or negative retry_count counts as 0.
func (s *Store) Claim(ctx context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	if err := dialect.CheckClaim(p); err != nil {
		return nil, err
	}
	info, err := s.tableInfo(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: claim: %w", err)
	}
	if info.claimIndex == "" && !info.byStatusIndex() {
		// No index walks the pending rows in id order: a slot's rows would
		// be found only by reading every pending row.
		p.Slot, p.Slots = 0, 0
	}
	q, sel := s.claimSQLs(info, p)
	var st claimStatements
	st.lock, st.sel, st.lease = lockSQLs(q, false), sel, s.leaseSQL(info)
	if p.Ordered {
		st.heads, st.ord = s.headReadsFor(info, p, false), s.orderedClaimSQL(info, p, sel)
	}
	if p.Ordered && p.Slots > 1 {
		st.lock, st.prefer = s.slotSQLs(info, p), true
		st.pick, st.byID = s.slotPickSQL(info, p)
		st.pickIDs = pickRows * p.Limit
		if info.byStatusIndex() {
			// Each id costs a read of the other slots' rows beside it, here
			// and in the read of runs, which reads every row never claimed
			// up to the last candidate.
			st.pickIDs = p.Limit
		}
		st.slotHeads, st.slotOrd = s.headReadsFor(info, p, true), s.orderedSlotSQL(info, p, sel)
	}
	var c *outbox.Claim
	err = s.core.InTx(ctx, func(tx *sql.Tx) (err error) {
		c, err = s.claimOnce(ctx, tx, info, st, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: claim: %w", err)
	}
	return c, nil
}

// claimStatements are the statements of a claim.
type claimStatements struct {
	lock []lockSQL // the unordered claim's locking SELECTs, run in turn (claimSQLs, slotSQLs)
	// prefer says that lock is slotSQLs's: the statements of the slot, then
	// the same statements for the other rows.
	prefer bool
	sel    []string    // the columns they decode
	lease  string      // the UPDATE that leases the rows (leaseSQL)
	heads  *headReads  // ordered claims without the head index: the reads that take heads (heads.go)
	ord    *orderedSQL // ordered claims with the head index: the statements that take heads (ordered.go)
	// With prefer: the slot's candidates in id order are picked and then
	// locked by id (slotPickSQL), instead of by the slot's last locking
	// SELECT; pickIDs is how many ids pick reads.
	pick, byID string
	pickIDs    int
	// With prefer: heads and ord restricted to the slot's aggregates.
	slotHeads *headReads
	slotOrd   *orderedSQL
}

// claimOnce runs a claim in one READ COMMITTED transaction: the locking
// SELECTs, then for an ordered claim the steps of runs.go, then the UPDATE
// that leases what it keeps.
func (s *Store) claimOnce(ctx context.Context, tx *sql.Tx, info tableInfo, st claimStatements, p outbox.ClaimParams) (*outbox.Claim, error) {
	cl := &claimLocks{s: s, ctx: ctx, tx: tx, sel: st.sel, p: p, locked: map[int64]*lockedRow{}}
	othersRan, err := cl.candidates(st)
	if err != nil {
		return nil, err
	}
	keep := cl.order
	if p.Ordered {
		if keep, err = cl.keepOrdered(info, st, othersRan); err != nil {
			return nil, err
		}
	} else if len(st.lock) > 1 { // the rows due again came first (claimSQLs)
		slices.SortFunc(keep, func(a, b *lockedRow) int { return cmp.Compare(a.id, b.id) })
	}
	return s.lease(ctx, tx, st, p, keep)
}

// claimLocks is a claim in progress: its transaction and parameters, and
// the rows its locking SELECTs locked so far.
type claimLocks struct {
	s   *Store
	ctx context.Context
	tx  *sql.Tx
	sel []string
	p   outbox.ClaimParams

	locked map[int64]*lockedRow
	order  []*lockedRow // in the order the SELECTs returned them
	last   int64        // the id of the last row the last SELECT returned; 0 when it returned none
}

// lock runs a locking SELECT, keeps the rows it had not locked yet, and
// returns how many rows the SELECT returned.
func (cl *claimLocks) lock(extra *int64, query string, args ...any) (int, error) {
	rows, err := cl.s.lockRows(cl.ctx, cl.tx, cl.sel, cl.p, extra, query, args...)
	for _, r := range rows {
		if cl.locked[r.id] == nil {
			cl.locked[r.id] = r
			cl.order = append(cl.order, r)
		}
	}
	cl.last = 0
	if len(rows) > 0 {
		cl.last = rows[len(rows)-1].id
	}
	return len(rows), err
}

// candidates runs the claim's first step, the unordered claim's
// locking SELECTs (st.lock), up to p.Limit rows. With a preference, the
// first half of st.lock are the slot's statements, and the pick (st.pick)
// takes the place of the last of them: othersRan says that one of the
// others ran, which means the slot's due rows ran out before the limit.
func (cl *claimLocks) candidates(st claimStatements) (othersRan bool, err error) {
	p := cl.p
	for i := range st.lock {
		if len(cl.locked) == p.Limit {
			break
		}
		if st.pick != "" && i == len(st.lock)/2-1 {
			// The pick replaces the slot's last locking SELECT, that of the
			// rows in id order.
			picked, err := cl.s.pickSlot(cl.ctx, cl.tx, st, p, p.Limit-len(cl.locked), cl.lock)
			if err != nil {
				return false, err
			}
			if picked == st.pickIDs {
				break // more of the slot's rows are due: not the others
			}
			continue
		}
		q := st.lock[i]
		args := []any{p.Limit - len(cl.locked)}
		if q.slot {
			args = []any{p.Slots, p.Slot, p.Limit - len(cl.locked)}
		}
		if _, err := cl.lock(nil, q.query, args...); err != nil {
			return false, err
		}
		othersRan = othersRan || st.prefer && i >= len(st.lock)/2
	}
	return othersRan, nil
}

// keepOrdered returns the runs of an ordered claim's candidates (runs.go).
// When the candidates filled the claim and the runs came back short, the
// candidates were rows blocked behind earlier ones: it takes heads too,
// and the runs of everything locked then.
func (cl *claimLocks) keepOrdered(info tableInfo, st claimStatements, othersRan bool) ([]*lockedRow, error) {
	s, ctx, tx, p := cl.s, cl.ctx, cl.tx, cl.p
	full := len(cl.locked) == p.Limit
	keep, err := s.keepRuns(ctx, tx, info, p, cl.locked)
	if err != nil || !full || len(keep) >= p.Limit {
		return keep, err
	}
	after := int64(0)
	switch {
	case len(st.lock) == 1: // one SELECT in id order: every due row up to its last is locked
		after = cl.last
	case st.prefer && len(st.lock) == 2 && othersRan:
		// The slot's SELECT came back short, so every due row of the slot
		// is locked (by this claim or another), and the other rows'
		// SELECT, in id order, locked the rest up to its last. When the
		// slot's SELECT filled the claim alone, the other rows before its
		// last are not locked: from the first due row.
		after = cl.last
	}
	if st.prefer && !othersRan {
		// The slot's rows filled the candidates but are held back (behind
		// rows other relays hold): the slot's heads first, so that the
		// claim does not take other relays' aggregates while its own have
		// heads. The window of the walk starts after the slot's last
		// candidate when its SELECT was one in id order.
		slotAfter := int64(0)
		if len(st.lock) == 2 {
			slotAfter = cl.last
		}
		if err := s.lockHeads(ctx, tx, st.slotOrd, st.slotHeads, p, p.Limit-len(keep), slotAfter, cl.lock); err != nil {
			return nil, err
		}
		if keep, err = s.keepRuns(ctx, tx, info, p, cl.locked); err != nil {
			return nil, err
		}
	}
	if len(keep) > 0 && st.prefer && !othersRan {
		// Not after a slot that gave some: heads of other slots taken in
		// every claim would keep their relays' candidates blocked behind
		// this relay's batches.
		return keep, nil
	}
	// Heads of any aggregate: without a preference; when the slot's due
	// rows ran out; or when the slot gave nothing, so that a slot no live
	// relay has (a view that is out of date, until the next heartbeats) is
	// not left behind.
	if err := s.lockHeads(ctx, tx, st.ord, st.heads, p, p.Limit-len(keep), after, cl.lock); err != nil {
		return nil, err
	}
	return s.keepRuns(ctx, tx, info, p, cl.locked)
}

// lease leases the rows a claim keeps and returns them as the claim, the
// rows that cannot be decoded in Claim.Malformed.
func (s *Store) lease(ctx context.Context, tx *sql.Tx, st claimStatements, p outbox.ClaimParams, keep []*lockedRow) (*outbox.Claim, error) {
	c := &outbox.Claim{}
	ids := make([]any, len(keep))
	for i, r := range keep {
		ids[i] = r.id
		if r.malforms != nil {
			c.Malformed = append(c.Malformed, outbox.MalformedRow{Message: r.message, Err: r.malforms})
			continue
		}
		c.Messages = append(c.Messages, r.message)
	}
	rowcheck.ReadSizes(ctx, tx, s.sql(payloadSizesSQL(s.table.quoted(), st.sel)), c.Malformed)
	for lo := 0; lo < len(ids); lo += s.chunk {
		chunk := ids[lo:min(lo+s.chunk, len(ids))]
		args := append([]any{p.Lease.Microseconds()}, chunk...)
		_, err := tx.ExecContext(ctx, s.sql(st.lease+" WHERE id IN ("+sqlcore.Placeholders(len(chunk))+")"), args...)
		if err != nil {
			return nil, fmt.Errorf("lease rows: %w", err)
		}
	}
	return c, nil
}

// pickSlot takes a claim's candidates of its slot with st.pick, a plain
// read of their ids, and st.byID (slotPickSQL), and returns how many ids it
// picked.
func (s *Store) pickSlot(ctx context.Context, tx *sql.Tx, st claimStatements, p outbox.ClaimParams, limit int,
	lock func(extra *int64, query string, args ...any) (int, error)) (int, error) {
	var ids []any
	err := queryRows(ctx, tx, s.sql(st.pick), []any{p.Slots, p.Slot, st.pickIDs}, func(rows *sql.Rows) error {
		var id int64
		err := rows.Scan(&id)
		ids = append(ids, id)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pick rows: %w", err)
	}
	return len(ids), lockPicked(st.byID, ids, limit, lock)
}

// lockHeads locks up to limit heads the way ordered claims took them before
// runs (ordered.go), with lock. On a table with the head index, the walk's
// window starts above after: the claim's first step locked the first due
// rows in id order up to after, except those other claims held locked, so
// below it lie only rows this claim holds already, which the walk would
// probe again and return (a transaction's own locks are not skipped),
// counting them in its limit, and rows of other claims. (The loose scan
// reads every aggregate anyway, and its rows carry their count.) On a
// table without the head index, pickHeads finds them (heads.go).
func (s *Store) lockHeads(ctx context.Context, tx *sql.Tx, ord *orderedSQL, heads *headReads, p outbox.ClaimParams, limit int,
	after int64, lock func(extra *int64, query string, args ...any) (int, error)) error {
	if ord == nil {
		ids, err := s.pickHeads(ctx, tx, heads, p, limit)
		if err != nil {
			return err
		}
		return lockPicked(heads.byID, ids, limit, lock)
	}
	var slot []any // the slot's parameters of statements restricted to it, right before the limit
	if ord.slot {
		slot = []any{p.Slots, p.Slot}
	}
	withLimit := func(limit int, args ...any) []any { return append(append(args, slot...), limit) }
	switch {
	case s.fewAggregates(p):
		// Every aggregate fits in one claim: the loose scan alone.
		var aggs int64
		if _, err := lock(&aggs, ord.heads, withLimit(limit)...); err != nil {
			return err
		}
		s.countAggregates(p, aggs)
	default:
		bound := int64(math.MaxInt64)
		beyond := true
		switch err := tx.QueryRowContext(ctx, s.sql(ord.bound), append([]any{after}, slot...)...).Scan(&bound); {
		case errors.Is(err, sql.ErrNoRows):
			bound, beyond = math.MaxInt64, false // the whole backlog fits in the window
		case err != nil:
			return fmt.Errorf("read the window: %w", err)
		}
		n, err := lock(nil, ord.walk, withLimit(limit, after, bound)...)
		if err != nil {
			return err
		}
		if n < limit && beyond {
			// Rows locked before come back too (this transaction's own
			// locks are not skipped); lock keeps them once.
			var aggs int64
			if _, err := lock(&aggs, ord.heads, withLimit(limit-n)...); err != nil {
				return err
			}
			s.countAggregates(p, aggs)
		}
	}
	return nil
}

// lockRows runs a locking SELECT of a claim and decodes its rows. With
// extra, each row ends with one more column, scanned into it (the same in
// every row).
func (s *Store) lockRows(ctx context.Context, tx *sql.Tx, sel []string, p outbox.ClaimParams, extra *int64,
	query string, args ...any) ([]*lockedRow, error) {
	rows, err := tx.QueryContext(ctx, s.sql(query), args...)
	if err != nil {
		return nil, fmt.Errorf("lock rows: %w", err)
	}
	defer rows.Close()
	maxPayload := rowcheck.PayloadLimit(p.MaxPayload)
	typeAt, idAt := slices.Index(sel, sqlcore.ColAggregateType), slices.Index(sel, sqlcore.ColAggregateID)
	var tail []any
	if extra != nil {
		tail = []any{extra}
	}
	var out []*lockedRow
	for rows.Next() {
		var id, attempt int64
		row, err := dialect.Scan(rows, sel, maxPayload, "{}", []any{&id, &attempt}, tail) // "{}": read only in part (claimColumns)
		if err != nil {
			return out, fmt.Errorf("read row: %w", err)
		}
		m, vals := row.Message, row.Vals
		m.RowID, m.Attempt = id, int(attempt)
		r := &lockedRow{id: id, message: m, nullAgg: vals[typeAt] == nil || vals[idAt] == nil}
		r.agg.typ, _, _ = sqlcore.Text(vals[typeAt])
		r.agg.id, _, _ = sqlcore.Text(vals[idAt])
		r.malforms = rowcheck.RowError("mysqlstore", m, row.Err, row.TooLarge, maxPayload)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("lock rows: %w", err)
	}
	return out, rows.Close()
}

// leaseSQL is the start of the UPDATE that counts the attempt of claimed
// rows and leases them; its first parameter is the lease in microseconds,
// then comes WHERE id IN (...). It names the primary key when the table has
// it on id, so that on a table small next to the batch the optimizer reads
// only the claimed rows instead of scanning all.
func (s *Store) leaseSQL(info tableInfo) string {
	t := s.table.quoted()
	if info.pkID {
		t += " FORCE INDEX (PRIMARY)"
	}
	return "UPDATE " + t + " SET retry_count = " + nextAttempt("retry_count") + "," +
		" next_retry_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, updated_at = UTC_TIMESTAMP(6)"
}

// nextAttempt is the SQL of the attempt a claim hands out for a row whose
// retry_count is col, and writes as its retry_count: the attempts made so
// far, with NULL and negative counts taken as 0 and counts past
// rowcheck.MaxAttempt - 1 (an INT's limit, or a BIGINT column's larger
// value) as rowcheck.MaxAttempt - 1, plus one. It never overflows an INT,
// which would fail every claim; a row handed out with rowcheck.MaxAttempt
// comes back malformed.
func nextAttempt(col string) string {
	return fmt.Sprintf("CAST(LEAST(GREATEST(COALESCE(%s, 0), 0), %d) AS SIGNED) + 1", col, rowcheck.MaxAttempt-1)
}

// claimColumns is the select list of the columns sel of the table aliased
// c, reading at most maxPayload + 1 characters of the payload (see
// sqlcore.Dialect.ClaimColumns).
func claimColumns(sel []string, maxPayload int) string {
	return dialect.ClaimColumns("c.", sel, maxPayload)
}

// claimSQL builds the locking SELECT of a claim; its one parameter is the
// limit. On a table without the (status, id) index but with the contract's
// (status, next_retry_at) one, and the primary key on id, see claimSQLs.
func (s *Store) claimSQL(info tableInfo, p outbox.ClaimParams) (string, []string) {
	qs, sel := s.claimSQLs(info, p)
	return qs[0], sel
}

// claimSQLs builds the locking SELECTs of a claim, which it runs in turn,
// each with the limit of what is left to take as its one parameter.
//
// With the (status, id) index, one SELECT walks it in id order. A table
// with only the contract's indexes has none: the SELECT then walked the
// primary key past every sent row the table keeps, or sorted every due
// row. There the contract's (status, next_retry_at) index, which InnoDB
// ends with the primary key, gives two ranges with no sort and no sent row:
// the rows due again (a retry, or a lease that ran out) in (next_retry_at,
// id) order, then the rows never claimed (next_retry_at NULL) in id order.
// Rows leased by other claims lie between the two, and are not read.
func (s *Store) claimSQLs(info tableInfo, p outbox.ClaimParams) ([]string, []string) {
	return s.claimSQLsWhere(info, p, "")
}

// claimHead is the start of a claim's locking SELECT, up to its FROM
// (the table aliased c), and the columns it decodes.
func (s *Store) claimHead(info tableInfo, p outbox.ClaimParams) (string, []string) {
	sel := sqlcore.SelectColumns(info.Columns)
	return "SELECT c.id, " + nextAttempt("c.retry_count") + ", " + claimColumns(sel, rowcheck.PayloadLimit(p.MaxPayload)) +
		" FROM " + s.table.quoted() + " AS c", sel
}

// pickRows is how many times the limit of ids a plain read picks before
// the claim locks them by id (a slot's candidates, slotPickSQL; heads
// without the head index, pickHeads): the rows other claims hold by the
// time it locks are skipped, and the spare ids keep the claim full.
const pickRows = 2

// slotPickSQL builds the two statements by which a claim with a slot
// preference takes its slot's candidates: pick, a plain read of the ids of
// the slot's first due rows (parameters Slots, Slot, the number of ids),
// and byID, the locking read of the rows with those ids (%s: their
// placeholders; then the limit) that are still pending and due, in id
// order, skipping the rows other claims hold. On a table with only the
// contract's indexes the pick reads the rows never claimed, which
// (status, next_retry_at) keeps in id order; the slot's rows due again
// come from its locking SELECT, which the pick follows (candidates).
//
// Why not the locking scan of the unordered claim: it walks the (status,
// id) index from the first pending row, over the leased rows of every
// relay's batches in flight, locking each as it reads it, and a slot's
// rows are a third of them with three relays, so it walks three times as
// far; on MariaDB the acknowledgements of those rows wait for it
// (docs/ordering.md, "MariaDB: ordered claims that read before they
// lock"). On the contract's index it walks every other slot's rows never
// claimed as well: three ordered relays drained 0.09 to 0.30 of unordered
// so. The plain read locks nothing; the locking read locks only rows of
// the slot, which other relays do not pick. What the claim keeps is
// decided by the runs rule, on the rows it locked, as for any candidates.
func (s *Store) slotPickSQL(info tableInfo, p outbox.ClaimParams) (pick, byID string) {
	t := s.table.quoted()
	switch {
	case info.byStatusIndex():
		pick = "SELECT c.id FROM " + t + " AS c FORCE INDEX (" + quoteIdent(info.statusIndex) + ")" +
			" WHERE c.status = 0 AND c.next_retry_at IS NULL AND " + slotHash + " = ? ORDER BY c.id LIMIT ?"
	case info.claimIndex != "":
		pick = "SELECT c.id FROM " + t + " AS c FORCE INDEX (" + quoteIdent(info.claimIndex) + ") WHERE " + pickDue +
			" AND " + slotHash + " = ? ORDER BY c.id LIMIT ?"
	default:
		return "", "" // Claim takes no preference there
	}
	return pick, s.byIDSQL(info, p)
}

// byIDSQL is the locking read of the rows with the ids a plain read picked
// (%s: their placeholders; then the limit) that are still pending and due,
// in id order, skipping the rows other claims hold.
func (s *Store) byIDSQL(info tableInfo, p outbox.ClaimParams) string {
	head, _ := s.claimHead(info, p)
	pk := ""
	if info.pkID {
		pk = " FORCE INDEX (PRIMARY)"
	}
	return head + pk + " WHERE c.id IN (%s) AND " + pickDue + " ORDER BY c.id LIMIT ? FOR UPDATE SKIP LOCKED"
}

// pickDue is the condition "row c is pending and due" of picks and of byIDSQL.
const pickDue = "c.status = 0 AND (c.next_retry_at IS NULL OR c.next_retry_at <= UTC_TIMESTAMP(6))"

// lockSQL is one of a claim's locking SELECTs.
type lockSQL struct {
	query string
	// slot says that its parameters are ClaimParams.Slots and Slot
	// (slotHash), then the limit; otherwise the limit alone.
	slot bool
}

// lockSQLs are the locking SELECTs qs, with the parameters slot says.
func lockSQLs(qs []string, slot bool) []lockSQL {
	out := make([]lockSQL, len(qs))
	for i, q := range qs {
		out[i] = lockSQL{query: q, slot: slot}
	}
	return out
}

// slotHash is the hash of a row's aggregate that a slot preference
// (ClaimParams.Slot) is taken from, modulo its first parameter, Slots.
// CRC32 is cheap and the same on MySQL and MariaDB; a row with a NULL
// aggregate has a NULL hash and belongs to no slot.
const slotHash = "CRC32(CONCAT(c.aggregate_type, '/', c.aggregate_id)) MOD ?"

// slotSQLs builds the locking SELECTs of a claim with a slot preference
// (ClaimParams.Slot and Slots): the unordered claim's SELECTs restricted to
// the rows of the slot's aggregates, then the same SELECTs for every other
// row (those with a NULL aggregate too), so that the second lot never
// returns, and counts against its limit, a row the first one locked. Each
// takes Slots and Slot, then the limit of what is left to take.
//
// They only choose the candidates: what a claim keeps of them is decided
// by the runs rule (runs.go) as for any candidates, so the preference, and
// whatever view of the relays it came from, cannot change the order.
func (s *Store) slotSQLs(info tableInfo, p outbox.ClaimParams) []lockSQL {
	in, _ := s.claimSQLsWhere(info, p, " AND "+slotHash+" = ?")
	out, _ := s.claimSQLsWhere(info, p, " AND NOT ("+slotHash+" <=> ?)")
	return append(lockSQLs(in, true), lockSQLs(out, true)...)
}

// claimSQLsWhere is claimSQLs with extra added to the WHERE of each SELECT.
func (s *Store) claimSQLsWhere(info tableInfo, p outbox.ClaimParams, extra string) ([]string, []string) {
	head, sel := s.claimHead(info, p)
	const tail = " LIMIT ? FOR UPDATE SKIP LOCKED"
	if info.byStatusIndex() {
		force := " FORCE INDEX (" + quoteIdent(info.statusIndex) + ")"
		return []string{
			head + force + " WHERE c.status = 0 AND c.next_retry_at <= UTC_TIMESTAMP(6)" + extra +
				" ORDER BY c.status, c.next_retry_at, c.id" + tail,
			head + force + " WHERE c.status = 0 AND c.next_retry_at IS NULL" + extra + " ORDER BY c.id" + tail,
		}, sel
	}
	force := ""
	if info.claimIndex != "" {
		force = " FORCE INDEX (" + quoteIdent(info.claimIndex) + ")"
	}
	return []string{head + force + " WHERE " + pickDue + extra + " ORDER BY c.id" + tail}, sel
}
