package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/rowcheck"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// Claim takes up to p.Limit due pending rows in id order, counts the attempt
// (retry_count + 1, returned as Message.Attempt) and leases them until now +
// p.Lease, in one UPDATE ... RETURNING inside one write transaction. The
// statement writes first, so the transaction holds SQLite's write lock from
// its first step (as BEGIN IMMEDIATE does) and concurrent claimers, in this
// process or others, wait for each other under busy_timeout instead of
// sharing rows.
//
// A row is due when next_retry_at is NULL, not later than now, or not a time
// SQLite can read (so that a row with a garbled time is retried, not stuck).
// With p.Ordered it claims runs, as [outbox.ClaimParams.Ordered] says
// (runs.go). Rows that cannot be decoded, and rows whose retry_count reached
// the most attempts an INT counts (2147483647), come back in
// Claim.Malformed, each error naming the row; a retry_count that is NULL,
// negative or not a number counts as 0.
func (s *Store) Claim(ctx context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	if err := dialect.CheckClaim(p); err != nil {
		return nil, err
	}
	cols, err := s.columns(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	st := claimStatements{}
	st.claim, st.sel = s.claimSQL(cols, p)
	if p.Ordered {
		st.runs, st.more = s.runsSQL(cols, p, st.sel), s.moreDueSQL(cols)
		st.ord = s.orderedClaimSQL(cols, p, st.sel)
		if st.ord == nil {
			st.heads = s.headsSQL(p, st.sel)
		}
	}
	var c *outbox.Claim
	err = s.core.InTx(ctx, func(tx *sql.Tx) (err error) {
		c, err = s.claimOnce(ctx, tx, st, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	// RETURNING gives rows in no defined order.
	slices.SortFunc(c.Messages, func(a, b *outbox.Message) int { return cmp.Compare(a.RowID, b.RowID) })
	slices.SortFunc(c.Malformed, func(a, b outbox.MalformedRow) int { return cmp.Compare(a.Message.RowID, b.Message.RowID) })
	return c, nil
}

// claimStatements are the statements of a claim.
type claimStatements struct {
	claim string      // the unordered claim
	sel   []string    // the columns it returns
	runs  string      // ordered claims: the claim of runs (runs.go)
	more  string      // ordered claims: whether more rows were due (runs.go)
	ord   *orderedSQL // ordered claims on a table with the head index: the claim of heads (ordered.go)
	heads string      // ordered claims on a table without it: the claim of heads (runs.go)
}

// claimOnce runs a claim in its own transaction: the claim statement, or
// for an ordered claim the steps of runs.go.
func (s *Store) claimOnce(ctx context.Context, tx *sql.Tx, st claimStatements, p outbox.ClaimParams) (*outbox.Claim, error) {
	sel := st.sel
	now := time.Now()
	c := &outbox.Claim{}
	maxPayload := rowcheck.PayloadLimit(p.MaxPayload)
	// read runs one claim statement and adds the rows it returns to c.
	read := func(query string, args ...any) (int, error) {
		rows, err := s.core.In(tx).QueryContext(ctx, s.sql(query), args...)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			row, err := dialect.Scan(rows, sel, maxPayload, "{}", nil, nil) // "{}": read only in part (returning)
			if err != nil {
				return n, fmt.Errorf("scan: %w", err)
			}
			n++
			if err := rowcheck.RowError("sqlitestore", row.Message, row.Err, row.TooLarge, maxPayload); err != nil {
				c.Malformed = append(c.Malformed, outbox.MalformedRow{Message: row.Message, Err: err})
				continue
			}
			c.Messages = append(c.Messages, row.Message)
		}
		if err := rows.Err(); err != nil {
			return n, err
		}
		return n, rows.Close()
	}
	var err error
	if p.Ordered {
		err = s.claimRuns(ctx, tx, st, p, now, read)
	} else {
		_, err = read(st.claim, formatTime(now.Add(p.Lease)), formatTime(now), p.Limit)
	}
	if err != nil {
		return nil, err
	}
	rowcheck.ReadSizes(ctx, tx, s.sql(payloadSizesSQL(s.table.quoted(), sel)), c.Malformed)
	return c, nil
}

// selectColumns are the columns a claim returns, in this order: id and
// retry_count, then the message's (sqlcore.SelectColumns).
func selectColumns(cols columns) []string {
	return append([]string{sqlcore.ColID, sqlcore.ColRetryCount}, sqlcore.SelectColumns(cols.Columns)...)
}

// claimSQL builds the claim statement; its parameters are the lease's end,
// now, and the limit.
func (s *Store) claimSQL(cols columns, p outbox.ClaimParams) (string, []string) {
	sel := selectColumns(cols)
	return claimUpdate(s.table.quoted()) + " WHERE id IN (" + s.candidateSQL(cols) + ") RETURNING " +
		claimColumns(sel, rowcheck.PayloadLimit(p.MaxPayload)), sel
}

// candidateSQL is the SELECT of the ids an unordered claim takes (and an
// ordered one looks at first, runs.go): the first due pending rows in id
// order. Its parameters are ?2, now, and ?3, the limit.
func (s *Store) candidateSQL(cols columns) string {
	t := s.table.quoted()
	if cols.pendingIndex {
		// Left to itself the planner prefers the covering (status,
		// next_retry_at) index and sorts every pending row by id.
		return "SELECT c.id FROM " + t + " AS c INDEXED BY " + quoteIdent(s.table.pendingIndex()) +
			" WHERE c.status = 0 AND " + dueSQL + " ORDER BY c.id LIMIT ?3"
	}
	// Without it (a table with only the contract's indexes) the planner
	// walks the rowids past every sent row kept. The rows never claimed
	// (next_retry_at NULL) are one range of the (status, next_retry_at)
	// index, in rowid order; the others (leased, or waiting out a
	// backoff: few) another, sorted. The claim takes the oldest of both.
	return "SELECT id FROM (SELECT id FROM (SELECT c.id FROM " + t + " AS c WHERE c.status = 0 AND c.next_retry_at IS NULL" +
		" ORDER BY c.next_retry_at, c.id LIMIT ?3) UNION ALL SELECT id FROM (SELECT c.id FROM " + t +
		" AS c WHERE c.status = 0 AND c.next_retry_at IS NOT NULL AND " + dueSQL + " ORDER BY +c.id LIMIT ?3)) ORDER BY id LIMIT ?3"
}

// dueSQL is "row c is due at ?2".
const dueSQL = "COALESCE(julianday(c.next_retry_at, 'auto'), 0) <= julianday(?2)"

// claimUpdate is the start of a claim statement on the quoted table t: it
// counts the attempt and leases the row until ?1, at ?2 (now). The attempt
// is the count of attempts made so far plus one, where a count that is
// NULL, negative or not a number is taken as 0 and one past
// rowcheck.MaxAttempt - 1 (a huge integer, which adding one would turn into
// a REAL) as rowcheck.MaxAttempt - 1, so that the count stays an integer the
// fence can match; a row handed out with rowcheck.MaxAttempt comes back
// malformed.
func claimUpdate(t string) string {
	return fmt.Sprintf("UPDATE %s SET retry_count = MIN(MAX(CAST(COALESCE(retry_count, 0) AS INTEGER), 0), %d) + 1,"+
		" next_retry_at = ?1, updated_at = ?2", t, rowcheck.MaxAttempt-1)
}

// claimColumns is the list of the columns sel, as a claim returns them,
// reading at most maxPayload + 1 characters of the payload (see
// sqlcore.Dialect.ClaimColumns).
func claimColumns(sel []string, maxPayload int) string {
	return dialect.ClaimColumns("", sel, maxPayload)
}
