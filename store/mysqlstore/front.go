package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// The front scan: step (2) of an ordered claim (runs.go) read as one range
// of ids instead of one range per aggregate.
//
// Step (2) must find, for each candidate aggregate, its pending (or dead,
// when dead rows block) rows up to its last candidate. The rows that can end
// a run are those the claim neither locked nor has in Chain: rows other
// claims hold, rows in backoff, rows committed after the locking read passed
// them, dead rows. While one relay drains a backlog there are few of them,
// and every row before the last candidate is one the claim knows. So the
// front scan reads the ids of every pending (and dead) row up to the last
// candidate from the (status, id) index, which holds them in id order (no
// row of the table is read, only the index), and looks up the aggregates of
// the ids it does not know, by primary key. It reads what step (2) reads and
// more (every aggregate's rows in the range, not only the candidates'), in
// a READ COMMITTED statement started after the locking reads as step (2)
// is, so the runs it gives are the same; the lookup that follows reads
// aggregate columns, which never change, and a row gone by then was
// acknowledged (or purged) and ends no run.
//
// It pays when the unknown rows are few; with several relays (their
// batches in flight lie among this claim's rows) or many dead or blocked
// rows at the front, they are not. So the scan reads at most the rows the
// claim knows plus frontSlack; when it comes back full, the claim reads
// step (2) per aggregate as before, and so do the next frontPause claims of
// the Store. Claims with slots (several relays) skip it: the other slots'
// due rows lie among theirs.
//
// Measured on MariaDB 10.11 (2 cores), one relay draining 100,000 rows in
// batches of 1,000 over 5,000 aggregates: steps (2) and (3) took 14 ms of a
// 52 ms claim per aggregate, 4.4 ms with the front scan; in batches of 100
// over 100 aggregates, 3.7 ms and 1.3 ms (docs/ordering.md).

// frontSlack is how many rows the front scan may read that the claim does
// not know: a quarter of the limit, at least 16.
func frontSlack(limit int) int { return max(limit/4, 16) }

// frontPause is how many claims skip the front scan after one came back
// full.
const frontPause = 32

// frontPolicy says when ordered claims try the front scan.
type frontPolicy int

const (
	frontAuto   frontPolicy = iota // try it, and pause after it came back full
	frontAlways                    // try it on every claim (tests)
	frontNever                     // read per aggregate (tests)
)

// frontScanSQL returns the front scan's statement: the ids of the pending
// (and, when dead rows block, dead) rows up to an id, from the (status, id)
// index, at most a number of rows. Its parameters are that id and that
// number, once per status.
func (s *Store) frontScanSQL(info tableInfo, p outbox.ClaimParams) string {
	part := func(status string) string {
		return "(SELECT id FROM " + s.table.quoted() + " FORCE INDEX (" + quoteIdent(info.claimIndex) + ")" +
			" WHERE status = " + status + " AND id <= ? ORDER BY id LIMIT ?)"
	}
	q := part("0")
	if p.BlockOnDead {
		q += " UNION ALL " + part("2")
	}
	return q
}

// readFront is step (2) by the front scan. It returns ok false, having read
// nothing it returns, when the scan does not apply or came back full: the
// caller then reads step (2) per aggregate.
func (s *Store) readFront(ctx context.Context, tx *sql.Tx, info tableInfo, p outbox.ClaimParams,
	locked map[int64]*lockedRow, chained map[int64]bool, last map[aggKey]int64) (pending map[aggKey][]int64, ok bool, err error) {
	if info.claimIndex == "" || !info.pkID || p.Slots > 1 || len(last) == 0 || s.front == frontNever {
		return nil, false, nil
	}
	if s.front == frontAuto && s.frontPaused.Skip() {
		return nil, false, nil
	}
	var hi int64
	for _, l := range last {
		hi = max(hi, l)
	}
	most := len(locked) + len(p.Chain) + frontSlack(p.Limit)
	args := []any{hi, most + 1} // one more: a scan of most rows is whole
	if p.BlockOnDead {
		args = append(args, hi, most+1)
	}
	var unknown []int64
	read := 0
	err = queryRows(ctx, tx, s.sql(s.frontScanSQL(info, p)), args, func(rows *sql.Rows) error {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		read++
		if locked[id] == nil && !chained[id] {
			unknown = append(unknown, id)
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("read the front: %w", err)
	}
	// A status's part that came back full may have more rows up to hi;
	// counting all parts together errs on the side of giving up.
	if read > most || len(unknown) > frontSlack(p.Limit) {
		s.frontPaused.Start(frontPause)
		return nil, false, nil
	}
	pending = map[aggKey][]int64{}
	for _, r := range locked {
		if !r.nullAgg {
			pending[r.agg] = append(pending[r.agg], r.id)
		}
	}
	if err := s.lookUpAggregates(ctx, tx, unknown, last, pending); err != nil {
		return nil, false, err
	}
	return pending, true, nil
}

// lookUpAggregates adds to pending the ids that belong to an aggregate of
// last, up to its last candidate, reading their aggregates by primary key.
// A row with no aggregate is no aggregate's; a row gone is no one's.
func (s *Store) lookUpAggregates(ctx context.Context, tx *sql.Tx, ids []int64, last map[aggKey]int64,
	pending map[aggKey][]int64) error {
	slices.Sort(ids)
	for lo := 0; lo < len(ids); lo += s.chunk {
		chunk := ids[lo:min(lo+s.chunk, len(ids))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		err := queryRows(ctx, tx, s.sql(s.aggregatesOfSQL(len(chunk))), args, func(rows *sql.Rows) error {
			var id int64
			var typ, aid sql.NullString
			if err := rows.Scan(&id, &typ, &aid); err != nil {
				return err
			}
			a := aggKey{typ.String, aid.String}
			if l, ok := last[a]; ok && typ.Valid && aid.Valid && id <= l {
				pending[a] = append(pending[a], id)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read the front's aggregates: %w", err)
		}
	}
	return nil
}

// aggregatesOfSQL returns the look-up of n rows' aggregates by id.
func (s *Store) aggregatesOfSQL(n int) string {
	return "SELECT id, aggregate_type, aggregate_id FROM " + s.table.quoted() + " WHERE id IN (" + sqlcore.Placeholders(n) + ")"
}

// queryRows runs query in tx and calls each for every row.
func queryRows(ctx context.Context, tx *sql.Tx, query string, args []any, each func(*sql.Rows) error) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
