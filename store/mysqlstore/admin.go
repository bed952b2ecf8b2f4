package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/rowcheck"
)

const (
	// defaultDeadLimit is how many rows ListDead returns when the filter says 0.
	defaultDeadLimit = 100
	// maxDeadLimit caps ListDead.
	maxDeadLimit = 10_000
	// adminBatch is how many rows RetryDead and DiscardDead change per statement.
	adminBatch = 1000
	// maxArchiveBatch caps the rows one Archive call moves.
	maxArchiveBatch = 10_000
)

// deadWhere builds the condition selecting the dead rows f matches, and its arguments.
func deadWhere(info tableInfo, f outbox.DeadFilter) (string, []any, error) {
	conds := []string{"status = 2"}
	var args []any
	if len(f.RowIDs) > 0 {
		conds = append(conds, "id IN ("+placeholders(len(f.RowIDs))+")")
		for _, id := range f.RowIDs {
			args = append(args, id)
		}
	}
	for _, c := range []struct{ col, v string }{
		{"event_type", f.EventType}, {"aggregate_type", f.AggregateType}, {"aggregate_id", f.AggregateID},
	} {
		if c.v != "" {
			conds = append(conds, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	if f.OlderThan > 0 {
		conds = append(conds, "updated_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND")
		args = append(args, f.OlderThan.Microseconds())
	}
	if f.ErrorContains != "" {
		if !info.lastError {
			return "", nil, errors.New("the table has no last_error column to search")
		}
		conds = append(conds, "INSTR(last_error, ?) > 0")
		args = append(args, f.ErrorContains)
	}
	return strings.Join(conds, " AND "), args, nil
}

// ListDead returns the dead rows f matches in id order, at most f.Limit
// (default 100, capped at 10,000), without the payloads over f.MaxPayload.
// Rows that cannot be decoded are listed with what could be read. It only
// reads.
func (s *Store) ListDead(ctx context.Context, f outbox.DeadFilter) ([]outbox.DeadMessage, error) {
	info, err := s.tableInfo(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: list dead: %w", err)
	}
	where, args, err := deadWhere(info, f)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: list dead: %w", err)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultDeadLimit
	}
	sel := selectColumns(info)
	lastErr := "NULL"
	if info.lastError {
		lastErr = "last_error"
	}
	maxPayload, payloadAt := rowcheck.PayloadLimit(f.MaxPayload), slices.Index(sel, colPayload)
	q := "SELECT c.id, COALESCE(c.retry_count, 0), " + claimColumns(sel, maxPayload) + ", " + lastErr +
		", c.updated_at, LENGTH(c.payload) FROM " + s.table.quoted() + " AS c WHERE " + where + " ORDER BY c.id LIMIT ?"
	rows, err := s.db.QueryContext(ctx, q, append(args, min(limit, maxDeadLimit))...)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: list dead: %w", err)
	}
	defer rows.Close()
	var out []outbox.DeadMessage
	for rows.Next() {
		var id, retries int64
		vals := make([]any, len(sel)+3)
		ptrs := []any{&id, &retries}
		for i := range vals {
			ptrs = append(ptrs, &vals[i])
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("mysqlstore: list dead: read row: %w", err)
		}
		if maxPayload > 0 && rowcheck.Len(vals[payloadAt]) > maxPayload {
			vals[payloadAt] = nil // read only in part
		}
		m, _ := decodeRow(sel, vals[:len(sel)]) // a dead row may well be malformed; list what there is
		m.RowID = id
		size, _ := vals[len(sel)+2].(int64)
		d := outbox.DeadMessage{Message: m, Attempts: int(retries), PayloadSize: size}
		d.Reason, _, _ = text(vals[len(sel)])
		d.DiedAt, _ = parseTime(vals[len(sel)+1])
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysqlstore: list dead: %w", err)
	}
	return out, nil
}

// RetryDead makes the dead rows f matches pending again with a fresh attempt
// count (retry_count 0, next_retry_at NULL; last_error is kept until the
// next attempt) and returns how many it changed. It works in statements of
// 1,000 rows, each its own transaction; f.Limit does not apply.
func (s *Store) RetryDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	return s.eachDeadBatch(ctx, "retry dead", f,
		"UPDATE "+s.table.quoted()+" SET status = 0, retry_count = 0, next_retry_at = NULL, updated_at = UTC_TIMESTAMP(6)")
}

// DiscardDead deletes the dead rows f matches and returns how many. It works
// in statements of 1,000 rows, each its own transaction; f.Limit does not apply.
func (s *Store) DiscardDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	return s.eachDeadBatch(ctx, "discard dead", f, "DELETE FROM "+s.table.quoted())
}

// eachDeadBatch runs stmt WHERE (the filter) ORDER BY id LIMIT adminBatch
// until it changes fewer rows than a batch.
func (s *Store) eachDeadBatch(ctx context.Context, what string, f outbox.DeadFilter, stmt string) (int64, error) {
	info, err := s.tableInfo(ctx, s.db)
	if err != nil {
		return 0, fmt.Errorf("mysqlstore: %s: %w", what, err)
	}
	where, args, err := deadWhere(info, f)
	if err != nil {
		return 0, fmt.Errorf("mysqlstore: %s: %w", what, err)
	}
	q := fmt.Sprintf("%s WHERE %s ORDER BY id LIMIT %d", stmt, where, adminBatch)
	var total int64
	for {
		var n int64
		err := retryDeadlock(ctx, func() (err error) {
			n, err = execCount(ctx, s.db, q, args)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("mysqlstore: %s: %w", what, err)
		}
		total += n
		if n < adminBatch {
			return total, nil
		}
	}
}

// ArchiveTable returns the name of the table [Store.Archive] moves sent rows
// into: the table's name with "_archive" appended (shortened with a hash
// when longer than MySQL's 64 characters), in the same database.
func (s *Store) ArchiveTable() string { return s.archiveTable().raw }

func (s *Store) archiveTable() table {
	name := s.table.name + "_archive"
	if len(name) > 64 {
		h := fnv.New32a()
		h.Write([]byte(s.table.name))
		tag := fmt.Sprintf("_%08x_archive", h.Sum32())
		name = s.table.name[:64-len(tag)] + tag
	}
	t := table{raw: name, schema: s.table.schema, name: name}
	if t.schema != "" {
		t.raw = t.schema + "." + name
	}
	return t
}

// Archive moves up to p.Batch (at most 10,000) sent rows last updated at
// least p.OlderThan ago into [Store.ArchiveTable] (created LIKE the table by
// the first call that has a row to move; columns the table gained later are
// added), or deletes them when p.Delete (which never creates the archive
// table), in one short READ COMMITTED transaction that skips rows other
// sessions hold, and returns how many it moved. Callers loop until it
// returns 0. It is safe for concurrent use, also by several processes on one
// table.
func (s *Store) Archive(ctx context.Context, p outbox.ArchiveParams) (int64, error) {
	if p.Batch < 1 {
		return 0, fmt.Errorf("mysqlstore: archive: batch %d is less than 1", p.Batch)
	}
	if _, err := s.tableInfo(ctx, s.db); err != nil {
		return 0, fmt.Errorf("mysqlstore: archive: %w", err)
	}
	age := max(p.OlderThan, 0).Microseconds()
	const old = " WHERE status = 1 AND updated_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"
	var cols string
	if !p.Delete {
		s.mu.Lock()
		ready := s.archiveCols != ""
		s.mu.Unlock()
		if !ready {
			// Create the archive table only for a row to move into it: a
			// scheduled archive that finds nothing old enough leaves no empty
			// table behind, and needs no CREATE right until then. The DDL
			// commits on its own in MySQL, so it cannot wait inside the
			// transaction below, after the rows are picked.
			var found int
			err := s.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM "+s.table.quoted()+old+")", age).Scan(&found)
			if err != nil {
				return 0, fmt.Errorf("mysqlstore: archive: %w", err)
			}
			if found == 0 {
				return 0, nil
			}
		}
		var err error
		if cols, err = s.ensureArchive(ctx); err != nil {
			return 0, fmt.Errorf("mysqlstore: archive: %w", err)
		}
	}
	var moved int64
	err := retryDeadlock(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		rows, err := tx.QueryContext(ctx, "SELECT id FROM "+s.table.quoted()+old+" LIMIT ? FOR UPDATE SKIP LOCKED",
			age, min(p.Batch, maxArchiveBatch))
		if err != nil {
			return err
		}
		var ids []any
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if len(ids) == 0 {
			moved = 0
			return nil
		}
		in := " WHERE id IN (" + placeholders(len(ids)) + ")"
		if !p.Delete {
			archive := s.archiveTable().quoted()
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+archive+" ("+cols+") SELECT "+cols+" FROM "+s.table.quoted()+in, ids...); err != nil {
				return fmt.Errorf("copy rows: %w", err)
			}
		}
		if moved, err = execCount(ctx, tx, "DELETE FROM "+s.table.quoted()+in, ids); err != nil {
			return err
		}
		return tx.Commit()
	})
	if err != nil {
		return 0, fmt.Errorf("mysqlstore: archive: %w", err)
	}
	return moved, nil
}

// ensureArchive creates the archive table LIKE the table if need be, adds
// the columns the table has and it lacks, and returns the column list both
// share. The archive's id keeps the rows' ids. Sessions racing through it
// are fine: CREATE TABLE IF NOT EXISTS takes a metadata lock, and a column
// another session added in the meantime counts as added.
func (s *Store) ensureArchive(ctx context.Context) (string, error) {
	s.mu.Lock()
	cached := s.archiveCols
	s.mu.Unlock()
	if cached != "" {
		return cached, nil
	}
	archive := s.archiveTable()
	if _, err := s.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+archive.quoted()+" LIKE "+s.table.quoted()); err != nil {
		return "", fmt.Errorf("create %s: %w", archive.raw, err)
	}
	live, err := columnDefs(ctx, s.db, s.table)
	if err != nil {
		return "", err
	}
	have, err := columnDefs(ctx, s.db, archive)
	if err != nil {
		return "", err
	}
	known := map[string]bool{}
	for _, c := range have {
		known[c.name] = true
	}
	names := make([]string, 0, len(live))
	for _, c := range live {
		names = append(names, quoteIdent(c.name))
		if known[c.name] {
			continue
		}
		// The type comes from information_schema of the live table, never from a caller.
		_, err := s.db.ExecContext(ctx, "ALTER TABLE "+archive.quoted()+" ADD COLUMN "+quoteIdent(c.name)+" "+c.typ+" NULL")
		if err != nil && !isMySQLError(err, errDupFieldName) {
			return "", fmt.Errorf("add column %s to %s: %w", c.name, archive.raw, err)
		}
	}
	cols := strings.Join(names, ", ")
	s.mu.Lock()
	s.archiveCols = cols
	s.mu.Unlock()
	return cols, nil
}

// errDupFieldName is ER_DUP_FIELDNAME: the column exists already.
const errDupFieldName = 1060

type columnDef struct{ name, typ string }

// columnDefs lists t's columns with their full types, in order.
func columnDefs(ctx context.Context, q queryer, t table) ([]columnDef, error) {
	rows, err := q.QueryContext(ctx, `SELECT column_name, column_type FROM information_schema.columns
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? ORDER BY ordinal_position`, t.schemaArg(), t.name)
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", t.raw, err)
	}
	defer rows.Close()
	var out []columnDef
	for rows.Next() {
		var c columnDef
		if err := rows.Scan(&c.name, &c.typ); err != nil {
			return nil, fmt.Errorf("read columns of %s: %w", t.raw, err)
		}
		c.name = strings.ToLower(c.name)
		out = append(out, c)
	}
	return out, rows.Err()
}
