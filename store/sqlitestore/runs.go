package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/rowcheck"
)

// An ordered claim hands out runs: for each aggregate, a prefix of its
// pending rows in id order, starting at its oldest pending row, none of
// whose rows has an earlier pending row (or dead row, when dead rows block)
// outside the claim. One statement does it (runsSQL):
//
//  1. the candidates: the unordered claim's rows (candidateSQL);
//  2. each candidate aggregate's pending (and, when dead rows block, dead)
//     rows up to its last candidate;
//  3. per aggregate, the rows of (2) up to the first one that is not a
//     candidate (a running minimum over a window), at most a quarter of the
//     limit (as on the other stores: an aggregate with a deep backlog at the
//     front would otherwise fill every claim alone), which it leases.
//
// SQLite lets one writer in at a time, and the statement writes, so it runs
// alone: nothing commits between its reads, and it reads what it leases
// from one state of the table. A row leased by another claim or waiting out
// a backoff is pending and not due, so it is in (2) and not in (1), and ends
// its run; a dead row does the same under DeadBlocks.
//
// When the candidates were as many as the limit and the runs came back
// shorter (rows blocked behind a head in backoff, leased or dead fill the
// front of the backlog), the claim then takes heads too, in the same
// transaction (ordered.go, or on a table without the head index headsSQL),
// so that the blocked rows cannot starve the other aggregates. The runs
// just leased are pending and not due by then, so they block their
// aggregates as any leased row does.

// runsSQL builds the statement that claims runs; its parameters are ?1 the
// lease's end, ?2 now and ?3 the limit.
//
// With the head index, (2) reads one range of it per aggregate, up to the
// last candidate, reading no sent row. Without it (a table with only the
// contract's indexes, whose (aggregate_type, aggregate_id) index would lead
// through every sent row an aggregate kept), (2) reads the (status,
// next_retry_at) index: the rows never claimed up to the last candidate (one
// range), the other pending rows (leased, in backoff, due again: about what
// is in flight) and the dead rows. Either way the read is bounded by the rows
// in front of the claim, not by the sent rows the table keeps.
func (s *Store) runsSQL(cols columns, p outbox.ClaimParams, sel []string) string {
	t := s.table.quoted()
	blocking := "0"
	if p.BlockOnDead {
		blocking = "0, 2"
	}
	var pend string
	if cols.headIndex {
		// The index's own condition, repeated so that SQLite sees the query
		// may use the partial index.
		pend = "SELECT h.id, h.aggregate_type AS at, h.aggregate_id AS ai FROM last JOIN " + t + " AS h INDEXED BY " +
			quoteIdent(s.table.headIndex()) + " ON h.aggregate_type = last.at AND h.aggregate_id = last.ai AND h.id <= last.hi" +
			" WHERE h.status IN (0, 2) AND h.status IN (" + blocking + ")"
	} else {
		pend = "SELECT u.id, u.at, u.ai FROM (" + s.pendingRanges(p, " AND h.id <= (SELECT max(hi) FROM last)") +
			") AS u JOIN last ON u.at = last.at AND u.ai = last.ai AND u.id <= last.hi"
	}
	return "WITH cand AS (SELECT c.id, c.aggregate_type AS at, c.aggregate_id AS ai FROM " + t + " AS c WHERE c.id IN (" +
		s.candidateSQL(cols) + "))," +
		" last AS (SELECT at, ai, max(id) AS hi FROM cand GROUP BY at, ai)," +
		" pend AS (" + pend + ")," +
		// ok stays 1 while every row so far of the aggregate is a candidate;
		// n counts them, and a run keeps at most a quarter of the limit.
		" run AS (SELECT p.id, min(c.id IS NOT NULL) OVER w AS ok, count(*) OVER w AS n" +
		" FROM pend AS p LEFT JOIN cand AS c ON c.id = p.id WINDOW w AS (PARTITION BY p.at, p.ai ORDER BY p.id)) " +
		claimUpdate(t) + " WHERE id IN (SELECT id FROM run WHERE ok AND n <= max(?3 / 4, 1)" +
		// A row with no aggregate (NULL) is no aggregate's run: decoding fails, the relay kills it.
		" UNION ALL SELECT id FROM cand WHERE at IS NULL OR ai IS NULL)" +
		" RETURNING " + claimColumns(sel, rowcheck.PayloadLimit(p.MaxPayload))
}

// pendingRanges reads the pending (and, when dead rows block, dead) rows as
// id, at and ai from the (status, next_retry_at) index, in three ranges
// that leave the sent rows out: the rows never claimed, the other pending
// rows (leased, in backoff, due again) and the dead rows; bound ends each
// range's condition.
func (s *Store) pendingRanges(p outbox.ClaimParams, bound string) string {
	part := func(cond string) string {
		return "SELECT h.id, h.aggregate_type AS at, h.aggregate_id AS ai FROM " + s.table.quoted() + " AS h WHERE " + cond + bound
	}
	pend := part("h.status = 0 AND h.next_retry_at IS NULL") + " UNION ALL " + part("h.status = 0 AND h.next_retry_at IS NOT NULL")
	if p.BlockOnDead {
		pend += " UNION ALL " + part("h.status = 2")
	}
	return pend
}

// moreDueSQL returns the statement that tells whether at least ?3 + 1 rows
// are due at ?2 (it returns a row then, none otherwise).
func (s *Store) moreDueSQL(cols columns) string {
	pending := ""
	if cols.pendingIndex {
		pending = " INDEXED BY " + quoteIdent(s.table.pendingIndex())
	}
	return "SELECT 1 FROM " + s.table.quoted() + " AS c" + pending + " WHERE c.status = 0 AND " + dueSQL + " LIMIT 1 OFFSET ?3"
}

// claimRuns runs an ordered claim in tx (see the top of this file), reading
// rows with read.
func (s *Store) claimRuns(ctx context.Context, tx *sql.Tx, st claimStatements, p outbox.ClaimParams, now time.Time,
	read func(query string, args ...any) (int, error)) error {
	leaseEnd, at := formatTime(now.Add(p.Lease)), formatTime(now)
	n, err := read(st.runs, leaseEnd, at, p.Limit)
	if err != nil || n >= p.Limit {
		return err
	}
	// The n rows just leased are no longer due: the candidates filled the
	// limit when limit - n rows are still due.
	var one int
	switch err := s.core.In(tx).QueryRowContext(ctx, s.sql(st.more), nil, at, p.Limit-n-1).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return nil // every due row was a candidate
	case err != nil:
		return fmt.Errorf("look for more due rows: %w", err)
	}
	heads := p
	heads.Limit = p.Limit - n
	if st.ord != nil {
		return s.claimOrdered(ctx, tx, st.ord, heads, now, read)
	}
	_, err = read(st.heads, leaseEnd, at, heads.Limit)
	return err
}

// headsSQL builds the heads claim of a table without the head index; its
// parameters are ?1 the lease's end, ?2 now and ?3 the limit. It reads the
// first pending (or, when dead rows block, dead) row of every aggregate
// from the (status, next_retry_at) index, in the three ranges runsSQL reads
// (the backlog, never a sent row), and claims those that are due, oldest
// first; a row with no aggregate is a head of its own. The walk it
// replaces probed each due row's aggregate through (aggregate_type,
// aggregate_id), a read of every row the table keeps of the aggregate per
// row walked: when the runs were short because the front of the backlog
// was leased, it walked the whole backlog (177 msgs/s over 100 aggregates
// of 1,000 sent rows each, 46,715 unordered).
func (s *Store) headsSQL(p outbox.ClaimParams, sel []string) string {
	t := s.table.quoted()
	return "WITH pend AS MATERIALIZED (" + s.pendingRanges(p, "") + "), first AS (SELECT min(id) AS id FROM pend WHERE at IS NOT NULL AND ai IS NOT NULL" +
		" GROUP BY at, ai UNION ALL SELECT id FROM pend WHERE at IS NULL OR ai IS NULL) " +
		claimUpdate(t) + " WHERE id IN (SELECT c.id FROM " + t + " AS c WHERE c.id IN (SELECT id FROM first) AND c.status = 0 AND " +
		dueSQL + " ORDER BY c.id LIMIT ?3) RETURNING " + claimColumns(sel, rowcheck.PayloadLimit(p.MaxPayload))
}
