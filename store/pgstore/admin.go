package pgstore

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

var _ outbox.Admin = (*Store)(nil)

// poolRunner runs sqlcore's statements (the dead-letter admin, Stats,
// CountRows, Ping) on the pool, with their "?" parameters numbered.
type poolRunner struct{ pool *pgxpool.Pool }

func (r poolRunner) Query(ctx context.Context, q string, args []any, row func(sqlcore.Scanner) error) error {
	rows, err := r.pool.Query(ctx, numbered(q), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return sqlcore.Each(rows, row)
}

func (r poolRunner) Exec(ctx context.Context, q string, args []any) (int64, error) {
	tag, err := r.pool.Exec(ctx, numbered(q), args...)
	return tag.RowsAffected(), err
}

func (r poolRunner) Ping(ctx context.Context) error { return r.pool.Ping(ctx) }

// numbered turns the "?" parameters of q, outside quotes, into $1, $2, ...
func numbered(q string) string {
	var b strings.Builder
	n, quote := 0, byte(0)
	for i := range len(q) {
		switch c := q[i]; {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
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
	parts[len(parts)-1] = sqlcore.ArchiveName(parts[len(parts)-1], 63)
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
