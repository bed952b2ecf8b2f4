package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

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
)

// deadWhere builds the condition selecting the dead rows f matches, and its arguments.
func deadWhere(cols columns, f outbox.DeadFilter) (string, []any, error) {
	conds := []string{"status = 2"}
	var args []any
	if len(f.RowIDs) > 0 {
		conds = append(conds, "id IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(f.RowIDs)), ", ")+")")
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
		conds = append(conds, "julianday(updated_at) <= julianday(?)")
		args = append(args, formatTime(time.Now().Add(-f.OlderThan)))
	}
	if f.ErrorContains != "" {
		if !cols.lastError {
			return "", nil, errors.New("the table has no last_error column to search")
		}
		conds = append(conds, "instr(last_error, ?) > 0")
		args = append(args, f.ErrorContains)
	}
	return strings.Join(conds, " AND "), args, nil
}

// ListDead returns the dead rows f matches in id order, at most f.Limit
// (default 100, capped at 10,000), without the payloads over f.MaxPayload.
// Rows that cannot be decoded are listed with what could be read. It only
// reads.
func (s *Store) ListDead(ctx context.Context, f outbox.DeadFilter) ([]outbox.DeadMessage, error) {
	cols, err := s.columns(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list dead: %w", err)
	}
	where, args, err := deadWhere(cols, f)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list dead: %w", err)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultDeadLimit
	}
	sel := selectColumns(cols)
	lastErr := "NULL"
	if cols.lastError {
		lastErr = "last_error"
	}
	maxPayload, payloadAt := rowcheck.PayloadLimit(f.MaxPayload), slices.Index(sel, colPayload)
	q := "SELECT " + claimColumns(sel, maxPayload) + ", " + lastErr + ", updated_at, length(CAST(payload AS BLOB)) FROM " +
		s.table.quoted() + " WHERE " + where + " ORDER BY id LIMIT ?"
	rows, err := s.db.QueryContext(ctx, q, append(args, min(limit, maxDeadLimit))...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list dead: %w", err)
	}
	defer rows.Close()
	var out []outbox.DeadMessage
	for rows.Next() {
		vals := make([]any, len(sel)+3)
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("sqlitestore: list dead: read row: %w", err)
		}
		if maxPayload > 0 && rowcheck.Len(vals[payloadAt]) > maxPayload {
			vals[payloadAt] = nil // read only in part
		}
		m, _ := decodeRow(sel, vals[:len(sel)]) // a dead row may well be malformed; list what there is
		size, _ := vals[len(sel)+2].(int64)
		d := outbox.DeadMessage{Message: m, Attempts: m.Attempt, PayloadSize: size}
		m.Attempt = 0 // not a claim
		d.Reason, _, _ = text(vals[len(sel)])
		d.DiedAt, _ = parseTime(vals[len(sel)+1])
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: list dead: %w", err)
	}
	return out, nil
}

// RetryDead makes the dead rows f matches pending again with a fresh attempt
// count (retry_count 0, next_retry_at NULL; last_error is kept until the
// next attempt) and returns how many it changed. It works in statements of
// 1,000 rows, each its own transaction; f.Limit does not apply.
func (s *Store) RetryDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	return s.eachDeadBatch(ctx, "retry dead", f,
		"UPDATE %[1]s SET status = 0, retry_count = 0, next_retry_at = NULL, updated_at = ? WHERE id IN (%[2]s)", true)
}

// DiscardDead deletes the dead rows f matches and returns how many. It works
// in statements of 1,000 rows, each its own transaction; f.Limit does not apply.
func (s *Store) DiscardDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	return s.eachDeadBatch(ctx, "discard dead", f, "DELETE FROM %[1]s WHERE id IN (%[2]s)", false)
}

// eachDeadBatch runs stmt (%[1]s the table, %[2]s a subquery of up to
// adminBatch matching ids, and a leading now argument when withNow) until it
// changes fewer rows than a batch.
func (s *Store) eachDeadBatch(ctx context.Context, what string, f outbox.DeadFilter, stmt string, withNow bool) (int64, error) {
	cols, err := s.columns(ctx, s.db)
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: %s: %w", what, err)
	}
	where, args, err := deadWhere(cols, f)
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: %s: %w", what, err)
	}
	q := fmt.Sprintf(stmt, s.table.quoted(),
		fmt.Sprintf("SELECT id FROM %s WHERE %s LIMIT %d", s.table.quoted(), where, adminBatch))
	var total int64
	for {
		all := args
		if withNow {
			all = append([]any{formatTime(time.Now())}, args...)
		}
		var n int64
		err := s.write(ctx, func() (err error) {
			n, err = execCount(ctx, s.db, q, all)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("sqlitestore: %s: %w", what, err)
		}
		total += n
		if n < adminBatch {
			return total, nil
		}
	}
}

// maxArchiveBatch caps the rows one Archive call moves (SQLite allows 32766
// parameters per statement).
const maxArchiveBatch = 10_000

// ArchiveTable returns the name of the table [Store.Archive] moves sent rows
// into: the table's name with "_archive" appended, in the same schema.
func (s *Store) ArchiveTable() string { return s.archiveTable().raw }

func (s *Store) archiveTable() table {
	return table{raw: s.table.raw + "_archive", schema: s.table.schema, name: s.table.name + "_archive"}
}

// Archive moves up to p.Batch (at most 10,000) sent rows last updated at least p.OlderThan
// ago into [Store.ArchiveTable] (created with the table's columns and
// declared types by the first call that has a row to move; columns the table
// gained later are added), or deletes them when p.Delete (which never creates
// the archive table), in one write transaction, and returns how many it
// moved. Rows are picked in no particular order, so a call never sorts the
// table; callers loop until it returns 0. It is safe for concurrent use: the
// write transaction holds the database's write lock, DDL included.
func (s *Store) Archive(ctx context.Context, p outbox.ArchiveParams) (int64, error) {
	if p.Batch < 1 {
		return 0, fmt.Errorf("sqlitestore: archive: batch %d is less than 1", p.Batch)
	}
	if _, err := s.columns(ctx, s.db); err != nil {
		return 0, fmt.Errorf("sqlitestore: archive: %w", err)
	}
	archive := s.archiveTable()
	batch := min(p.Batch, maxArchiveBatch)
	var moved int64
	err := s.write(ctx, func() error {
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		return inImmediateTx(ctx, conn, func() error {
			pick := "SELECT id FROM " + s.table.quoted() +
				" WHERE status = 1 AND julianday(updated_at) <= julianday(?) LIMIT ?"
			args := []any{formatTime(time.Now().Add(-max(p.OlderThan, 0))), batch}
			ids, err := queryIDs(ctx, conn, pick, args)
			if err != nil || len(ids) == 0 {
				return err
			}
			in := "id IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + ")"
			if !p.Delete {
				// Only now, with rows to move: a scheduled archive that finds
				// nothing old enough leaves no empty table behind. The DDL is
				// part of this transaction.
				cols, err := s.ensureArchive(ctx, conn, archive)
				if err != nil {
					return err
				}
				_, err = conn.ExecContext(ctx, "INSERT INTO "+archive.quoted()+" ("+cols+") SELECT "+cols+
					" FROM "+s.table.quoted()+" WHERE "+in, ids...)
				if err != nil {
					return fmt.Errorf("copy rows: %w", err)
				}
			}
			moved, err = execCount(ctx, conn, "DELETE FROM "+s.table.quoted()+" WHERE "+in, ids)
			return err
		})
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: archive: %w", err)
	}
	return moved, nil
}

// ensureArchive creates the archive table with the table's columns if need
// be, adds those it lacks, and returns the column list both share.
func (s *Store) ensureArchive(ctx context.Context, conn *sql.Conn, archive table) (string, error) {
	live, err := declaredColumns(ctx, conn, s.table)
	if err != nil {
		return "", err
	}
	have, err := declaredColumns(ctx, conn, archive)
	if err != nil {
		return "", err
	}
	if len(have) == 0 {
		// Rows keep their ids; the archive needs no AUTOINCREMENT, defaults or checks.
		defs := []string{"id INTEGER PRIMARY KEY"}
		for _, c := range live {
			if c.name != "id" {
				defs = append(defs, quoteIdent(c.name)+" "+declType(c.typ))
			}
		}
		if _, err := conn.ExecContext(ctx, "CREATE TABLE "+archive.quoted()+" ("+strings.Join(defs, ", ")+")"); err != nil {
			return "", fmt.Errorf("create %s: %w", archive.raw, err)
		}
	} else {
		known := map[string]bool{}
		for _, c := range have {
			known[c.name] = true
		}
		for _, c := range live {
			if known[c.name] {
				continue
			}
			if _, err := conn.ExecContext(ctx, "ALTER TABLE "+archive.quoted()+" ADD COLUMN "+quoteIdent(c.name)+" "+declType(c.typ)); err != nil {
				return "", fmt.Errorf("add column %s to %s: %w", c.name, archive.raw, err)
			}
		}
	}
	names := make([]string, len(live))
	for i, c := range live {
		names[i] = quoteIdent(c.name)
	}
	return strings.Join(names, ", "), nil
}

type declaredColumn struct{ name, typ string }

// declaredColumns lists t's columns with their declared types, in order.
func declaredColumns(ctx context.Context, q queryer, t table) ([]declaredColumn, error) {
	schema := t.schema
	if schema == "" {
		schema = "main"
	}
	rows, err := q.QueryContext(ctx, "SELECT name, type FROM pragma_table_info(?, ?) ORDER BY cid", t.name, schema)
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", t.raw, err)
	}
	defer rows.Close()
	var out []declaredColumn
	for rows.Next() {
		var c declaredColumn
		if err := rows.Scan(&c.name, &c.typ); err != nil {
			return nil, fmt.Errorf("read columns of %s: %w", t.raw, err)
		}
		c.name = strings.ToLower(c.name)
		out = append(out, c)
	}
	return out, rows.Err()
}

// declType returns a declared type safe to paste into DDL: the table's own
// when it is made of letters, digits, spaces, parentheses and commas (as
// "VARCHAR(64)" or "DECIMAL(10, 2)" are), else none.
func declType(typ string) string {
	for _, r := range typ {
		if !(r == ' ' || r == '(' || r == ')' || r == ',' || r == '_' ||
			r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return ""
		}
	}
	return typ
}

func queryIDs(ctx context.Context, q queryer, query string, args []any) ([]any, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []any
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
