package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/rowcheck"
)

// An ordered claim hands out only heads: rows with no earlier row of their
// aggregate that is pending (or dead, when dead rows block). Walking the
// pending rows in id order and probing each one's aggregate finds heads
// cheaply while they are dense at the front of the backlog (many
// aggregates), but when a few aggregates hold a deep backlog, a claim that
// finds fewer heads than its limit would walk, and probe, the whole backlog:
// seconds per claim for a backlog of tens of thousands, a quadratic drain. So,
// when the table has the head index of migration 0003 ((aggregate_type,
// aggregate_id, id, status) of pending and dead rows), an ordered claim, in
// its one write transaction:
//
//  1. claims the heads among the first orderedWindow(limit) due pending rows,
//     probing the head index once per row (its first statement writes, so
//     the transaction holds the write lock from its start, as a plain claim
//     does);
//  2. only when that found fewer heads than the limit: checks whether more
//     due rows lay beyond the window;
//  3. only then: reads every aggregate's first pending or dead row from the
//     head index (one pass over the index, in its order, with no table
//     reads) and claims the heads among them, oldest first.
//
// Each step sees the rows the previous one leased as not due, so no row is
// claimed twice, and SQLite's single writer keeps the table still meanwhile;
// the guarantee is that of the single walk, at a cost bounded by the window
// plus one pass over the head index. A table without the head index reads
// the first pending row of every aggregate from (status, next_retry_at)
// instead (headsSQL in runs.go).

// orderedWindow is how many due pending rows the walk looks at for a claim
// of limit rows.
func orderedWindow(limit int) int { return max(4*limit, 256) }

// headIndex is the name of the ordered claims' index (migration 0003).
func (t table) headIndex() string { return t.name + "_head" }

// orderedSQL are the statements of an ordered claim on a table with the head index.
type orderedSQL struct {
	walk   string // step 1; parameters ?1 lease end, ?2 now, ?3 limit
	beyond string // step 2; parameters ?2 now, ?3 the offset of the first row beyond the window
	heads  string // step 3; parameters ?1 lease end, ?2 now, ?3 limit
}

// orderedClaimSQL builds the statements of an ordered claim, or returns nil
// when the claim is not ordered or the table lacks the head index.
func (s *Store) orderedClaimSQL(cols columns, p outbox.ClaimParams, sel []string) *orderedSQL {
	if !p.Ordered || !cols.headIndex {
		return nil
	}
	t := s.table.quoted()
	pending, head := "", " INDEXED BY "+quoteIdent(s.table.headIndex())
	if cols.pendingIndex {
		pending = " INDEXED BY " + quoteIdent(s.table.pendingIndex())
	}
	// The index's own condition, repeated so that SQLite sees the query may
	// use the partial index; with DeadSkips, narrowed to pending rows.
	onHead := "h.status IN (0, 2)"
	if !p.BlockOnDead {
		onHead += " AND h.status = 0"
	}
	const due = "c.status = 0 AND COALESCE(julianday(c.next_retry_at, 'auto'), 0) <= julianday(?2)"
	update := claimUpdate(t) + " WHERE id IN (SELECT c.id FROM " + t + " AS c"
	tail := " ORDER BY c.id LIMIT ?3) RETURNING " + claimColumns(sel, rowcheck.PayloadLimit(p.MaxPayload))
	window := func(offset string) string {
		return "SELECT w.id FROM " + t + " AS w" + pending + " WHERE " + strings.ReplaceAll(due, "c.", "w.") +
			" ORDER BY w.id LIMIT 1 OFFSET " + offset
	}
	return &orderedSQL{
		walk: update + pending + " WHERE " + due + " AND c.id <= COALESCE((" + window(strconv.Itoa(orderedWindow(p.Limit)-1)) +
			"), 9223372036854775807) AND NOT EXISTS (SELECT 1 FROM " + t + " AS h" + head +
			" WHERE h.aggregate_type = c.aggregate_type AND h.aggregate_id = c.aggregate_id AND h.id < c.id AND " +
			onHead + ")" + tail,
		beyond: window("?3"),
		heads: update + " WHERE c.id IN (SELECT min(h.id) FROM " + t + " AS h" + head + " WHERE " + onHead +
			" GROUP BY h.aggregate_type, h.aggregate_id) AND " + due + tail,
	}
}

// claimOrdered runs the steps of an ordered claim in tx (see the top of this
// file), reading rows with read.
func (s *Store) claimOrdered(ctx context.Context, tx *sql.Tx, ord *orderedSQL, p outbox.ClaimParams, now time.Time,
	read func(query string, args ...any) (int, error)) error {
	leaseEnd, at := formatTime(now.Add(p.Lease)), formatTime(now)
	n, err := read(ord.walk, leaseEnd, at, p.Limit)
	if err != nil || n >= p.Limit {
		return err
	}
	// The n rows just leased were due and inside the window: more than the
	// window's rows were due when a row is due at offset window - n now.
	var id int64
	switch err := s.core.In(tx).QueryRowContext(ctx, s.sql(ord.beyond), nil, at, orderedWindow(p.Limit)-n).Scan(&id); {
	case errors.Is(err, sql.ErrNoRows):
		return nil // the whole backlog fitted in the window: the walk saw every row
	case err != nil:
		return fmt.Errorf("look beyond the window: %w", err)
	}
	_, err = read(ord.heads, leaseEnd, at, p.Limit-n)
	return err
}
