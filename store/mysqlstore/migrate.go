package mysqlstore

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

//go:embed migrations/0001_create_outbox.up.sql
var createTableSQL string

// optionalColumns are the columns our table has beyond the contract, with
// the definitions Migrate adds them with to a table that lacks them.
var optionalColumns = []struct{ name, ddl string }{
	{"headers", "JSON NULL"},
	{"topic", "VARCHAR(255) NULL"},
	{"partition_key", "VARCHAR(255) NULL"},
	{"last_error", "TEXT NULL"},
	{"content_type", "VARCHAR(255) NULL"},
	{"payload_bytes", "LONGBLOB NULL"},
	{"deliver_at", "DATETIME(6) NULL"},
	{"expires_at", "DATETIME(6) NULL"},
}

// migrateLockTimeout is how many seconds Migrate waits for another process's
// migration of the same table to finish.
const migrateLockTimeout = 30

// Migrate creates the outbox table (migrations/0001_create_outbox.up.sql), or
// brings an existing one up to date: it adds the optional columns (headers,
// topic, partition_key, last_error, content_type, payload_bytes, deliver_at,
// expires_at), an index on (status, id) for the
// claim path and one on (status, aggregate_type, aggregate_id, id) for
// ordered claims when they are missing, and leaves everything else, including a
// hand-made table's DATETIME precision, as it is. It also creates the table
// of relays ([Store.RelaysTable]) if it is missing. It is idempotent, and
// safe to run from several processes at once: it holds a named lock
// (GET_LOCK) for the table while it works.
func (s *Store) Migrate(ctx context.Context) error {
	if len(s.mapping) > 0 {
		return fmt.Errorf("mysqlstore: migrate %s: %w (the table is the team's own)", s.table.raw, sqlcore.ErrMapped)
	}
	defer s.forget()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mysqlstore: migrate: %w", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, migrateLockSQL, s.table.schemaArg(), s.table.name, migrateLockTimeout).Scan(&got)
	if err != nil {
		return fmt.Errorf("mysqlstore: migrate: lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("mysqlstore: migrate: another migration of %s held the lock for %d s", s.table.raw, migrateLockTimeout)
	}
	//nolint:errcheck // the lock also ends with the session
	defer conn.ExecContext(context.WithoutCancel(ctx), migrateUnlockSQL, s.table.schemaArg(), s.table.name)

	if err := s.migrate(ctx, conn); err != nil {
		return fmt.Errorf("mysqlstore: migrate %s: %w", s.table.raw, err)
	}
	if err := s.migrateRelays(ctx, conn); err != nil {
		return fmt.Errorf("mysqlstore: migrate %s: %w", s.table.raw, err)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context, conn *sql.Conn) error {
	cols, err := tableColumns(ctx, conn, s.table)
	if err != nil {
		return err
	}
	if len(cols) == 0 {
		ddl := strings.ReplaceAll(createTableSQL, "{{.Table}}", s.table.quoted())
		if _, err := conn.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("create table: %w", err)
		}
		return nil
	}
	var alter []string
	for _, c := range optionalColumns {
		if !cols[c.name] {
			alter = append(alter, "ADD COLUMN "+c.name+" "+c.ddl)
		}
	}
	lead, err := leadingColumns(ctx, conn, s.table)
	if err != nil {
		return err
	}
	if claimIndex(lead) == "" {
		alter = append(alter, "ADD INDEX idx_status_id (status, id)")
	}
	if headIndex(lead) == "" {
		alter = append(alter, "ADD INDEX idx_status_aggregate (status, aggregate_type, aggregate_id, id)")
	}
	if len(alter) == 0 {
		return nil
	}
	if _, err := conn.ExecContext(ctx, "ALTER TABLE "+s.table.quoted()+" "+strings.Join(alter, ", ")); err != nil {
		return fmt.Errorf("alter table: %w", err)
	}
	return nil
}
