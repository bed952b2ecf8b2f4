package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// headReads are the statements by which an ordered claim on a table
// without the head index takes heads (pickHeads): plain reads of the
// backlog that find each aggregate's first pending (or, when dead rows
// block, dead) row, then a locking read of the due ones by id (byID).
//
// Why not a check per row of whether an earlier row of its aggregate is
// pending, as before: the only index that finds an aggregate's rows on such
// a table is the contract's (aggregate_type, aggregate_id), which holds
// every row the table keeps of it, sent ones included, so each check read
// the aggregate's history. Three ordered relays over 100 aggregates of
// 1,000 sent rows each spent 20 to over 100 s in one such walk on MariaDB,
// and did not drain 100,000 rows in 240 s (outbox bench --contract-indexes
// --sent-rows 100000). These reads cost the backlog they walk, never the
// history (TestHeadsReadTheBacklogNotTheHistory). The rules of runs.go
// decide what the claim keeps of what byID locks, as for any candidates.
type headReads struct {
	// others reads the pending rows that fresh does not, in any order:
	// with the (status, id) index, the dead rows when dead rows block
	// ("" otherwise); on the contract's (status, next_retry_at) index, the
	// rows claimed before (leased, waiting out a backoff, due again) and
	// the dead rows when they block. Columns as fresh's; parameters the
	// slot's when it reads pending rows (othersSlot).
	others     string
	othersSlot bool
	// fresh reads the pending rows with ids above its parameter, in id
	// order, up to its last parameter: with the (status, id) index, every
	// pending row; on the contract's index, the rows never claimed. Its
	// columns are id, aggregate_type, aggregate_id and whether the row is
	// pending, due (and of the slot) and so a head if it is its aggregate's
	// first; its parameters the slot's, if any, then the id and the limit.
	fresh string
	byID  string // byIDSQL: the locking read of the heads picked
	// slot says that the reads take ClaimParams.Slots and Slot first.
	slot bool
}

// headReadsFor builds the heads statements of a claim with p on a table
// without the head index; with slot, only heads of the slot's aggregates
// are taken.
func (s *Store) headReadsFor(info tableInfo, p outbox.ClaimParams, slot bool) *headReads {
	t := s.table.quoted()
	eligible := pickDue
	if slot {
		eligible += " AND " + slotHash + " = ?"
	}
	cols := "SELECT c.id, c.aggregate_type, c.aggregate_id, IF(" + eligible + ", 1, 0) FROM " + t + " AS c"
	dead := func(force string) string {
		if !p.BlockOnDead {
			return ""
		}
		return "SELECT c.id, c.aggregate_type, c.aggregate_id, 0 FROM " + t + " AS c" + force + " WHERE c.status = 2"
	}
	h := &headReads{byID: s.byIDSQL(info, p), slot: slot}
	if info.byStatusIndex() {
		force := " FORCE INDEX (" + quoteIdent(info.statusIndex) + ")"
		h.fresh = cols + force + " WHERE c.status = 0 AND c.next_retry_at IS NULL AND c.id > ? ORDER BY c.id LIMIT ?"
		h.others, h.othersSlot = cols+force+" WHERE c.status = 0 AND c.next_retry_at IS NOT NULL", slot
		if d := dead(force); d != "" {
			h.others += " UNION ALL " + d
		}
		return h
	}
	force := ""
	if info.claimIndex != "" {
		force = " FORCE INDEX (" + quoteIdent(info.claimIndex) + ")"
	}
	h.fresh = cols + force + " WHERE c.status = 0 AND c.id > ? ORDER BY c.id LIMIT ?"
	h.others = dead(force)
	return h
}

// headRow is a row of the heads reads.
type headRow struct {
	id       int64
	agg      aggKey
	nullAgg  bool // no aggregate: a head of its own (decoding fails, the relay kills it)
	eligible bool // pending, due and of the slot
}

// firstPage is how many rows pickHeads reads first for a claim of limit
// rows; each next read takes four times more, so that a backlog whose
// front is blocked costs a few reads, not one per page.
func firstPage(limit int) int { return max(4*limit, 256) }

// pickHeads returns the ids of up to pickRows * limit heads in id order,
// the oldest first: rows that are pending, due and of the slot, with no
// earlier pending (or blocking dead) row of their aggregate. It reads
// others, then fresh in growing pages, and stops after the first page that
// gave it a head, or at the end of the backlog. A row that fresh read is a
// head when it is its aggregate's first in fresh and no row of others
// comes before it; a row of others, when it is its aggregate's first there
// and fresh read past it without an earlier row of the aggregate.
//
// So a claim reads only as far into the backlog as its first heads lie.
// It does not read on for more: when heads are fewer than the limit (few
// aggregates, most of them in flight) that would read the whole backlog in
// every claim, for heads that are not there (three ordered relays over 100
// aggregates spent 45 ms a claim so, reading 10,000 rows). Heads further
// on come to the front as the rows before them are sent.
//
// When the whole backlog gave no head (every aggregate in flight, or held
// back), the next headsPause heads steps of the Store (of the same kind:
// of any aggregate, or of a slot's) read only the first page: each would
// read it all again for nothing, while the rows in flight are still being
// published. A head that appears further on in the meantime (a new
// aggregate at the end, a backoff that ran out) waits for them; one at the
// front does not. A backlog whose front is held back for good (dead rows
// under DeadBlocks) still gives heads further on to every claim, since the
// read that finds them pauses nothing.
func (s *Store) pickHeads(ctx context.Context, tx *sql.Tx, h *headReads, p outbox.ClaimParams, limit int) ([]any, error) {
	paused := &s.headsPaused[0]
	if h.slot {
		paused = &s.headsPaused[1]
	}
	ids, all, err := s.readHeads(ctx, tx, h, p, limit, !paused.Skip())
	if all && len(ids) == 0 {
		paused.Start(headsPause)
	}
	return ids, err
}

// headsPause is how many heads steps read only the first page after one
// that read the whole backlog and found no head.
const headsPause = 16

// readHeads is pickHeads; with deep false it reads only the first page.
// all says that it read the whole backlog.
func (s *Store) readHeads(ctx context.Context, tx *sql.Tx, h *headReads, p outbox.ClaimParams, limit int,
	deep bool) (ids []any, all bool, err error) {
	var slot []any
	if h.slot {
		slot = []any{p.Slots, p.Slot}
	}
	firstOther := map[aggKey]headRow{}
	var loose []headRow // rows with no aggregate
	if h.others != "" {
		var args []any
		if h.othersSlot {
			args = slot
		}
		err := s.readHeadRows(ctx, tx, h.others, args, func(r headRow) {
			if r.nullAgg {
				loose = append(loose, r)
			} else if f, ok := firstOther[r.agg]; !ok || r.id < f.id {
				firstOther[r.agg] = r
			}
		})
		if err != nil {
			return nil, false, err
		}
	}
	var heads []int64
	firstFresh := map[aggKey]int64{}
	after, page := int64(0), firstPage(limit)
	for {
		n := 0
		err := s.readHeadRows(ctx, tx, h.fresh, append(slices.Clone(slot), after, page), func(r headRow) {
			n, after = n+1, r.id
			if r.nullAgg {
				if r.eligible {
					heads = append(heads, r.id)
				}
				return
			}
			if _, seen := firstFresh[r.agg]; seen {
				return
			}
			firstFresh[r.agg] = r.id
			if f, ok := firstOther[r.agg]; r.eligible && (!ok || f.id > r.id) {
				heads = append(heads, r.id)
			}
		})
		if err != nil {
			return nil, false, err
		}
		done := n < page // fresh read to its end
		// The rows of others that fresh has read past (all of them when done).
		var ready []int64
		for a, f := range firstOther {
			if f.eligible && (done || f.id <= after) {
				if ff, ok := firstFresh[a]; !ok || ff > f.id {
					ready = append(ready, f.id)
				}
			}
		}
		for _, r := range loose {
			if r.eligible && (done || r.id <= after) {
				ready = append(ready, r.id)
			}
		}
		if done || !deep || len(heads)+len(ready) > 0 {
			found := append(heads, ready...)
			slices.Sort(found)
			for _, id := range found[:min(len(found), pickRows*limit)] {
				ids = append(ids, id)
			}
			return ids, done, nil
		}
		page *= 4
	}
}

// readHeadRows runs one of the heads reads and hands each row to each.
func (s *Store) readHeadRows(ctx context.Context, tx *sql.Tx, query string, args []any, each func(headRow)) error {
	err := queryRows(ctx, tx, s.sql(query), args, func(rows *sql.Rows) error {
		var r headRow
		var typ, id sql.NullString
		if err := rows.Scan(&r.id, &typ, &id, &r.eligible); err != nil {
			return err
		}
		r.agg, r.nullAgg = aggKey{typ.String, id.String}, !typ.Valid || !id.Valid
		each(r)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read heads: %w", err)
	}
	return nil
}

// lockPicked locks, with byID, up to limit of the rows with ids.
func lockPicked(byID string, ids []any, limit int, lock func(extra *int64, query string, args ...any) (int, error)) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := lock(nil, fmt.Sprintf(byID, sqlcore.Placeholders(len(ids))), append(ids, limit)...)
	return err
}
