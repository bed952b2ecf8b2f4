package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"text/template"

	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

//go:embed migrations/*.up.sql
var migrationFS embed.FS

// optionalColumns are the columns our table has beyond the contract, with
// their types, added by Migrate to a table that lacks them. All are NULL
// when unset.
var optionalColumns = []struct{ name, typ string }{
	{"headers", "TEXT"}, {"topic", "TEXT"}, {"partition_key", "TEXT"}, {"last_error", "TEXT"},
	{"content_type", "TEXT"}, {"payload_bytes", "BLOB"},
	{"deliver_at", "TEXT"}, {"expires_at", "TEXT"},
}

// Migrate creates the outbox table and its indexes, or brings an existing
// table up to date: it adds the optional columns (headers, topic,
// partition_key, last_error, content_type, payload_bytes, deliver_at, expires_at) and the pending-rows index when they are
// missing, and leaves everything else, including a hand-made table's column
// types, as it is. It runs in one BEGIN IMMEDIATE transaction, so it is
// idempotent and safe to run from several processes at once.
//
// The first migration (0001, the table and the contract's indexes) runs only
// when the table does not exist; the later ones are idempotent and run every
// time.
func (s *Store) Migrate(ctx context.Context) error {
	if len(s.mapping) > 0 {
		return fmt.Errorf("sqlitestore: migrate %s: %w (the table is the team's own)", s.table.raw, sqlcore.ErrMapped)
	}
	steps, err := s.migrations()
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	err = s.write(ctx, func() error { return s.migrateOnce(ctx, steps) })
	s.mu.Lock()
	s.cols = nil // detect again: the table may have changed
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.table.raw, err)
	}
	return nil
}

func (s *Store) migrateOnce(ctx context.Context, steps []string) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return inImmediateTx(ctx, conn, func() error {
		cols, err := tableColumns(ctx, conn, s.table)
		if err != nil {
			return err
		}
		for i, step := range steps {
			if i == 0 && len(cols) > 0 {
				continue // the table exists: keep it as it is
			}
			if i == 1 {
				if err := s.addMissingColumns(ctx, conn, cols); err != nil {
					return err
				}
			}
			if err := execScript(ctx, conn, step); err != nil {
				return err
			}
		}
		return nil
	})
}

// addMissingColumns adds the optional columns an existing table lacks; cols
// is empty when the table was just created with all of them.
func (s *Store) addMissingColumns(ctx context.Context, conn *sql.Conn, cols map[string]bool) error {
	if len(cols) == 0 {
		return nil
	}
	for _, c := range optionalColumns {
		if cols[c.name] {
			continue
		}
		if _, err := conn.ExecContext(ctx, "ALTER TABLE "+s.table.quoted()+" ADD COLUMN "+c.name+" "+c.typ); err != nil {
			return fmt.Errorf("add column %s: %w", c.name, err)
		}
	}
	return nil
}

// migrations returns the embedded migrations in order, rendered for the table.
func (s *Store) migrations() ([]string, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.up.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	data := struct{ Table, Name string }{Table: s.table.quoted(), Name: quoteIdent(s.table.name)}
	out := make([]string, 0, len(names))
	for _, n := range names {
		src, err := migrationFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		tmpl, err := template.New(n).Funcs(template.FuncMap{"index": s.table.index}).Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", n, err)
		}
		var b strings.Builder
		if err := tmpl.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("render %s: %w", n, err)
		}
		out = append(out, b.String())
	}
	return out, nil
}

// execScript runs the statements of a migration one by one. Statements end
// with a semicolon at the end of a line.
func execScript(ctx context.Context, conn *sql.Conn, script string) error {
	for _, stmt := range strings.Split(script, ";\n") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", firstLine(stmt), err)
		}
	}
	return nil
}

func stripComments(stmt string) string {
	var b strings.Builder
	for _, l := range strings.Split(stmt, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func firstLine(stmt string) string {
	s := strings.TrimSpace(stripComments(stmt))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// inImmediateTx runs f between BEGIN IMMEDIATE and COMMIT on conn, whatever
// the DSN's _txlock says, and rolls back when f or the commit fails. If even
// the rollback fails, the connection is discarded rather than returned to
// the pool inside a transaction.
func inImmediateTx(ctx context.Context, conn *sql.Conn, f func() error) error {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	err := f()
	if err == nil {
		if _, err = conn.ExecContext(ctx, "COMMIT"); err == nil {
			return nil
		}
		err = fmt.Errorf("commit: %w", err)
	}
	if _, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
	}
	return err
}
