package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// ArchiveTable returns the name of the table [Store.Archive] moves sent rows
// into: the table's name with "_archive" appended (shortened with a hash
// when longer than MySQL's 64 characters), in the same database.
func (s *Store) ArchiveTable() string { return s.archiveTable().raw }

func (s *Store) archiveTable() table {
	name := sqlcore.ArchiveName(s.table.name, dialect.MaxIdent)
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
	t, age := s.table.quoted(), dialect.AgeArg(max(p.OlderThan, 0))
	move := sqlcore.Move{Pick: fmt.Sprintf(archivePick, t), Args: []any{age, min(p.Batch, sqlcore.MaxArchiveBatch)}}
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
			if err := s.db.QueryRowContext(ctx, s.sql(fmt.Sprintf(archiveAnySQL, t)), age).Scan(&found); err != nil {
				return 0, fmt.Errorf("mysqlstore: archive: %w", err)
			}
			if found == 0 {
				return 0, nil
			}
		}
		cols, err := s.ensureArchive(ctx)
		if err != nil {
			return 0, fmt.Errorf("mysqlstore: archive: %w", err)
		}
		move.Archive, move.Columns = s.archiveTable().quoted(), func() (string, error) { return cols, nil }
	}
	var moved int64
	err := s.core.InTx(ctx, func(tx *sql.Tx) (err error) {
		moved, err = s.core.MoveRows(ctx, tx, move)
		return err
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
	if _, err := s.db.ExecContext(ctx, s.sql(fmt.Sprintf(archiveCreate, s.table.quoted(), archive.quoted()))); err != nil {
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
	missing, cols := dialect.ArchiveColumns(live, have)
	for _, c := range missing {
		_, err := s.db.ExecContext(ctx, s.sql(fmt.Sprintf(archiveAddColumn, s.table.quoted(), archive.quoted(), quoteIdent(c.Name), c.Type)))
		if err != nil && !isMySQLError(err, errDupFieldName) {
			return "", fmt.Errorf("add column %s to %s: %w", c.Name, archive.raw, err)
		}
	}
	s.mu.Lock()
	s.archiveCols = cols
	s.mu.Unlock()
	return cols, nil
}

// errDupFieldName is ER_DUP_FIELDNAME: the column exists already.
const errDupFieldName = 1060
