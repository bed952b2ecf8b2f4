package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// ArchiveTable returns the name of the table [Store.Archive] moves sent rows
// into: the table's name with "_archive" appended, in the same schema.
func (s *Store) ArchiveTable() string { return s.archiveTable().raw }

func (s *Store) archiveTable() table {
	name := sqlcore.ArchiveName(s.table.name, 0)
	return table{raw: s.table.raw + "_archive", schema: s.table.schema, name: name}
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
	move := sqlcore.Move{
		Pick: fmt.Sprintf(archivePick, s.table.quoted()),
		Args: []any{dialect.AgeArg(max(p.OlderThan, 0)), min(p.Batch, sqlcore.MaxArchiveBatch)},
	}
	var moved int64
	err := s.write(ctx, func() error {
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		if !p.Delete {
			// Only once there are rows to move: a scheduled archive that
			// finds nothing old enough leaves no empty table behind. The DDL
			// is part of the transaction.
			move.Archive = archive.quoted()
			move.Columns = func() (string, error) { return s.ensureArchive(ctx, conn, archive) }
		}
		return inImmediateTx(ctx, conn, func() (err error) {
			moved, err = s.core.MoveRows(ctx, conn, move)
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
	missing, cols := dialect.ArchiveColumns(live, have)
	if len(have) == 0 {
		// Rows keep their ids; the archive needs no AUTOINCREMENT, defaults or checks.
		defs := []string{"id INTEGER PRIMARY KEY"}
		for _, c := range live {
			if c.Name != s.column("id") {
				defs = append(defs, quoteIdent(c.Name)+" "+declType(c.Type))
			}
		}
		if _, err := conn.ExecContext(ctx, s.sql(fmt.Sprintf(archiveCreate, s.table.quoted(), archive.quoted(), strings.Join(defs, ", ")))); err != nil {
			return "", fmt.Errorf("create %s: %w", archive.raw, err)
		}
		return cols, nil
	}
	for _, c := range missing {
		_, err := conn.ExecContext(ctx, s.sql(fmt.Sprintf(archiveAddColumn, s.table.quoted(), archive.quoted(), quoteIdent(c.Name), declType(c.Type))))
		if err != nil {
			return "", fmt.Errorf("add column %s to %s: %w", c.Name, archive.raw, err)
		}
	}
	return cols, nil
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
