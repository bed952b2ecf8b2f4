package pgstore

import (
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

//go:embed migrations/*.up.sql
var migrations embed.FS

// migrationLockTimeout bounds how long a migration waits for the table's lock
// behind other transactions (while it waits, it blocks the table's writers).
const migrationLockTimeout = "10s"

// Index names the migrations create, by their placeholder.
var indexSuffixes = map[string]string{
	"status_index":    "_status_next_retry_at_idx",
	"aggregate_index": "_aggregate_idx",
	"pending_index":   "_pending_idx",
	"head_index":      headIndexSuffix,
}

// migratedColumns are the columns the migrations create.
var migratedColumns = append(slices.Clone(sqlcore.ContractColumns), "headers", "topic", "partition_key", "last_error",
	"content_type", "payload_bytes", "deliver_at", "expires_at")

// Migrate creates the table and its indexes, or adds the columns and indexes
// an older table (or one with only the contract columns) lacks. It is
// idempotent: when everything exists it only reads the catalog, so a relay can
// call it at every start. Otherwise it runs the embedded migrations in one
// transaction under an advisory lock on the table's name, so that processes
// migrating at once wait for each other, and gives up on the table's lock
// after 10 s rather than stall the table's writers. On a large existing
// table, create the indexes CONCURRENTLY by hand first (with the names
// Migrate uses) to avoid blocking writes while they build. Safe for
// concurrent use.
func (s *Store) Migrate(ctx context.Context) error {
	if s.m != nil {
		return fmt.Errorf("pgstore: migrate %s: %w: the table is the team's own, outbox migrate neither creates nor changes it",
			s.cfg.table, sqlcore.ErrMapped)
	}
	defer s.forget()
	parts, _ := splitTable(s.cfg.table) // validated by New
	name := parts[len(parts)-1]
	indexes := map[string]string{}
	for placeholder, suffix := range indexSuffixes {
		indexes[placeholder] = sqlcore.SideName(name, suffix, 63)
	}
	done, err := s.migrated(ctx, indexes)
	if err == nil && done {
		done, err = s.extrasDone(ctx)
	}
	if err != nil {
		return err
	}
	if done {
		return nil
	}

	pairs := []string{"{{table}}", s.ident}
	for placeholder, index := range indexes {
		pairs = append(pairs, "{{"+placeholder+"}}", pgx.Identifier{index}.Sanitize())
	}
	fill := strings.NewReplacer(pairs...)
	files, err := fs.Glob(migrations, "migrations/*.up.sql")
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	slices.Sort(files)

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate %s: begin: %w", s.cfg.table, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLockKey(s.ident)); err != nil {
		return fmt.Errorf("pgstore: migrate %s: lock: %w", s.cfg.table, err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+migrationLockTimeout+"'"); err != nil {
		return fmt.Errorf("pgstore: migrate %s: %w", s.cfg.table, err)
	}
	for _, file := range files {
		b, err := migrations.ReadFile(file)
		if err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		sql := fill.Replace(string(b))
		if strings.Contains(sql, "{{") {
			return fmt.Errorf("pgstore: migrate: %s has an unknown placeholder", file)
		}
		// No arguments: pgx sends the file with the simple protocol, which runs
		// several statements.
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("pgstore: migrate %s: %s: %w", s.cfg.table, file, err)
		}
	}
	if err := s.installExtras(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate %s: commit: %w", s.cfg.table, err)
	}
	return nil
}

// migrated reports whether the table already has every column and index the
// migrations create.
func (s *Store) migrated(ctx context.Context, indexes map[string]string) (bool, error) {
	names := make([]string, 0, len(indexes))
	for _, n := range indexes {
		names = append(names, n)
	}
	var cols, idx int
	err := s.pool.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM pg_attribute
	 WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attname = ANY($2::text[])),
	(SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
	 WHERE i.indrelid = to_regclass($1) AND c.relname = ANY($3::text[]))`,
		s.ident, migratedColumns, names).Scan(&cols, &idx)
	if err != nil {
		return false, fmt.Errorf("pgstore: migrate %s: read catalog: %w", s.cfg.table, err)
	}
	return cols == len(migratedColumns) && idx == len(names), nil
}

// migrationLockKey is the advisory lock key of a table's migrations.
func migrationLockKey(ident string) int64 {
	h := fnv.New64a()
	h.Write([]byte("outbox/pgstore/migrate " + ident))
	return int64(h.Sum64())
}
