package pgstore

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/rowcheck"
)

var _ outbox.Admin = (*Store)(nil)

const (
	// defaultDeadLimit is how many rows ListDead returns when the filter says 0.
	defaultDeadLimit = 100
	// maxDeadLimit caps ListDead.
	maxDeadLimit = 10_000
	// adminBatch is how many rows RetryDead and DiscardDead change per statement.
	adminBatch = 1000
)

// deadWhere builds the WHERE clause selecting the dead rows f matches, with
// its arguments numbered from $1.
func deadWhere(q *queries, f outbox.DeadFilter) (string, []any, error) {
	conds := []string{"status = 2"}
	var args []any
	add := func(cond string, arg any) {
		args = append(args, arg)
		conds = append(conds, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if len(f.RowIDs) > 0 {
		add("id = ANY($?::bigint[])", f.RowIDs)
	}
	if f.EventType != "" {
		add("event_type = $?", f.EventType)
	}
	if f.AggregateType != "" {
		add("aggregate_type = $?", f.AggregateType)
	}
	if f.AggregateID != "" {
		add("aggregate_id = $?", f.AggregateID)
	}
	if f.OlderThan > 0 {
		add("updated_at <= now() - $?::bigint * interval '1 microsecond'", f.OlderThan.Microseconds())
	}
	if f.ErrorContains != "" {
		if !q.lastError {
			return "", nil, fmt.Errorf("the table has no last_error column to search")
		}
		add("strpos(last_error, $?) > 0", f.ErrorContains)
	}
	return strings.Join(conds, " AND "), args, nil
}

// ListDead returns the dead rows f matches in id order, at most f.Limit
// (default 100, capped at 10,000), without the payloads over f.MaxPayload.
// Rows that cannot be decoded are listed with what could be read.
func (s *Store) ListDead(ctx context.Context, f outbox.DeadFilter) ([]outbox.DeadMessage, error) {
	q, err := s.queriesFor(ctx, s.poolRow)
	if err != nil {
		return nil, err
	}
	where, args, err := deadWhere(q, f)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list dead: %w", err)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultDeadLimit
	}
	limit = min(limit, maxDeadLimit)
	maxPayload := payloadLimit(f.MaxPayload)
	args = append(args, limit, maxPayload)
	lastErr := "NULL::text"
	if q.lastError {
		lastErr = "o.last_error"
	}
	// The attempts within an integer (a bigint column may hold more), then
	// what a claim reads.
	sql := fmt.Sprintf(`SELECT o.id, LEAST(GREATEST(COALESCE(o.retry_count, 0), 0), %d)::integer, %s, %s,
	o.updated_at::timestamptz, %s
FROM %s AS o WHERE %s ORDER BY o.id LIMIT $%d`,
		rowcheck.MaxAttempt, payloadParam(q.dataColumns, len(args)), lastErr, q.payloadSize(), s.ident, where, len(args)-1)
	rows, err := s.pool.Query(ctx, s.m.SQL(sql), args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list dead: %w", err)
	}
	defer rows.Close()
	var out []outbox.DeadMessage
	for rows.Next() {
		var r claimedRow
		var reason *string
		var died time.Time
		var size *int64
		if err := rows.Scan(append(r.dest(q, maxPayload), &reason, &died, &size)...); err != nil {
			return nil, fmt.Errorf("pgstore: list dead: read row: %w", err)
		}
		m, _ := r.message() // a dead row may well be malformed; list what there is
		d := outbox.DeadMessage{Message: m, Attempts: m.Attempt, DiedAt: died}
		if size != nil {
			d.PayloadSize = *size
		}
		m.Attempt = 0 // not a claim
		if reason != nil {
			d.Reason = *reason
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: list dead: %w", err)
	}
	return out, nil
}

// RetryDead makes the dead rows f matches pending again with a fresh attempt
// count (retry_count 0, next_retry_at NULL; last_error is kept until the next
// attempt) and returns how many it changed. It works in statements of 1,000
// rows, each its own transaction; f.Limit does not apply.
func (s *Store) RetryDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	return s.eachDeadBatch(ctx, "retry dead", f,
		"UPDATE %[1]s SET status = 0, retry_count = 0, next_retry_at = NULL, updated_at = now() WHERE id IN (%[2]s)")
}

// DiscardDead deletes the dead rows f matches and returns how many. It works
// in statements of 1,000 rows, each its own transaction; f.Limit does not apply.
func (s *Store) DiscardDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	return s.eachDeadBatch(ctx, "discard dead", f, "DELETE FROM %[1]s WHERE id IN (%[2]s)")
}

// eachDeadBatch runs stmt (with %[1]s the table and %[2]s a subquery of up to
// adminBatch matching ids) until it changes fewer rows than a batch.
func (s *Store) eachDeadBatch(ctx context.Context, what string, f outbox.DeadFilter, stmt string) (int64, error) {
	q, err := s.queriesFor(ctx, s.poolRow)
	if err != nil {
		return 0, err
	}
	where, args, err := deadWhere(q, f)
	if err != nil {
		return 0, fmt.Errorf("pgstore: %s: %w", what, err)
	}
	sub := fmt.Sprintf("SELECT id FROM %s WHERE %s LIMIT %d FOR UPDATE SKIP LOCKED", s.ident, where, adminBatch)
	sql := fmt.Sprintf(stmt, s.ident, sub)
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, s.m.SQL(sql), args...)
		if err != nil {
			return total, fmt.Errorf("pgstore: %s: %w", what, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < adminBatch {
			return total, nil
		}
	}
}

// Archive moves up to p.Batch sent rows last updated at least p.OlderThan ago
// into the archive table (the table's name with "_archive" appended, in the
// same schema, created with the table's columns by the first call that has a
// row to move), or deletes them when p.Delete (which never creates the
// archive table), in one statement, and returns how many it moved. Rows are
// picked in no particular order so that a call never sorts the whole table;
// callers loop until it returns 0. It is safe for concurrent use, also by
// several processes on one table.
func (s *Store) Archive(ctx context.Context, p outbox.ArchiveParams) (int64, error) {
	if p.Batch < 1 {
		return 0, fmt.Errorf("pgstore: archive: batch %d is less than 1", p.Batch)
	}
	if _, err := s.queriesFor(ctx, s.poolRow); err != nil {
		return 0, err
	}
	age := max(p.OlderThan, 0).Microseconds()
	const old = `status = 1 AND updated_at <= now() - $1::bigint * interval '1 microsecond'`
	pick := fmt.Sprintf(`SELECT id FROM %s WHERE %s LIMIT $2 FOR UPDATE SKIP LOCKED`, s.ident, old)
	var sql string
	if p.Delete {
		sql = fmt.Sprintf("DELETE FROM %s WHERE id IN (%s)", s.ident, pick)
	} else {
		s.mu.Lock()
		ready := s.archive != nil
		s.mu.Unlock()
		if !ready {
			// Create the archive table only for a row to move into it: a
			// scheduled archive that finds nothing old enough leaves no empty
			// table behind, and needs no CREATE right until then.
			var found bool
			err := s.pool.QueryRow(ctx, s.m.SQL(fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE %s)", s.ident, old)), age).Scan(&found)
			if err != nil {
				return 0, fmt.Errorf("pgstore: archive: %w", err)
			}
			if !found {
				return 0, nil
			}
		}
		archive, cols, err := s.archiveTable(ctx)
		if err != nil {
			return 0, err
		}
		sql = fmt.Sprintf(`WITH moved AS (DELETE FROM %[1]s WHERE id IN (%[2]s) RETURNING %[3]s)
INSERT INTO %[4]s (%[3]s) SELECT %[3]s FROM moved`, s.ident, pick, cols, archive)
	}
	tag, err := s.pool.Exec(ctx, s.m.SQL(sql), age, p.Batch)
	if err != nil {
		return 0, fmt.Errorf("pgstore: archive: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ArchiveTable returns the name of the table [Store.Archive] moves sent rows
// into: the table's name with "_archive" appended (shortened with a hash when
// too long), in the same schema.
func (s *Store) ArchiveTable() string {
	parts, _ := splitTable(s.cfg.table) // validated by New
	parts[len(parts)-1] = shorten(parts[len(parts)-1], "_archive", 63)
	return strings.Join(parts, ".")
}

// archiveTable creates the archive table if need be, adds any column the
// table has and it lacks, and returns its quoted name and the column list
// both share. The DDL runs under an advisory lock on the archive's name:
// two sessions racing through CREATE TABLE IF NOT EXISTS can otherwise both
// miss the table and one fail on the catalog's unique index (SQLSTATE 23505).
func (s *Store) archiveTable(ctx context.Context) (string, string, error) {
	s.mu.Lock()
	ready := s.archive
	s.mu.Unlock()
	if ready != nil {
		return ready.ident, ready.cols, nil
	}
	parts, _ := splitTable(s.ArchiveTable())
	ident := pgx.Identifier(parts).Sanitize()
	cols, err := s.tableColumns(ctx, s.poolRow)
	if err != nil {
		return "", "", err
	}
	order := migratedColumns
	if s.m != nil { // a table of its own layout: every column moves, the mapped ones and the others
		order = slices.Sorted(maps.Keys(cols))
	}
	names := make([]string, 0, len(cols))
	var add []string
	for _, c := range order {
		typ, ok := cols[c]
		if !ok {
			continue
		}
		if s.m != nil {
			c = pgx.Identifier{c}.Sanitize() // the table's name: left alone by the rewriter
		}
		names = append(names, c)
		// typ comes from format_type of the live table, never from a caller.
		add = append(add, fmt.Sprintf("ADD COLUMN IF NOT EXISTS %s %s", c, typ))
	}
	// No arguments: pgx sends the statements with the simple protocol, in one
	// implicit transaction, which the transaction-scoped lock lasts for.
	ddl := fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d); CREATE TABLE IF NOT EXISTS %s (LIKE %s); ALTER TABLE %s %s`,
		archiveLockKey(ident), ident, s.ident, ident, strings.Join(add, ", "))
	if _, err := s.pool.Exec(ctx, s.m.SQL(ddl)); err != nil {
		return "", "", fmt.Errorf("pgstore: archive: create %s: %w", s.ArchiveTable(), err)
	}
	a := &archiveInfo{ident: ident, cols: strings.Join(names, ", ")}
	s.mu.Lock()
	s.archive = a
	s.mu.Unlock()
	return a.ident, a.cols, nil
}

// archiveLockKey is the advisory lock key under which an archive table is
// created or extended.
func archiveLockKey(ident string) int64 {
	h := fnv.New64a()
	h.Write([]byte("outbox/pgstore/archive " + ident))
	return int64(h.Sum64())
}

type archiveInfo struct {
	ident string // quoted name
	cols  string // columns moved, comma-separated
}
