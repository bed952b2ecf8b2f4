package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

var _ outbox.Membership = (*Store)(nil)

// relaysSuffix ends the name of a table's table of relays.
const relaysSuffix = "_relays"

// relaysDDL creates the table of relays (%s: its quoted name). seen_until
// is in UTC, the database's clock (UTC_TIMESTAMP).
const relaysDDL = "CREATE TABLE IF NOT EXISTS %s (\n" +
	"  relay_id VARCHAR(64) NOT NULL PRIMARY KEY,\n" +
	"  seen_until DATETIME(6) NOT NULL\n" +
	") ENGINE=InnoDB"

// The statements of Heartbeat and Leave (%[1]s: the table of relays).
const (
	relaysUpsertSQL = "INSERT INTO %[1]s (relay_id, seen_until) VALUES (?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)" +
		" ON DUPLICATE KEY UPDATE seen_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND"
	relaysListSQL  = "SELECT relay_id, seen_until < UTC_TIMESTAMP(6) FROM %[1]s ORDER BY relay_id"
	relaysLeaveSQL = "DELETE FROM %[1]s WHERE relay_id = ?"
	// relaysExpireSQL deletes the rows of the relays whose time ran out,
	// by primary key (%[2]s: their placeholders), checking again.
	relaysExpireSQL = "DELETE FROM %[1]s WHERE relay_id IN (%[2]s) AND seen_until < UTC_TIMESTAMP(6)"
)

// RelaysTable returns the name of the table of relays ([Store.Heartbeat]):
// the outbox table's name with "_relays" appended (shortened with a hash
// past 64 characters), in the same database.
func (s *Store) RelaysTable() string { return s.relaysTable().raw }

func (s *Store) relaysTable() table {
	name := sqlcore.SideName(s.table.name, relaysSuffix, dialect.MaxIdent)
	t := table{raw: name, schema: s.table.schema, name: name}
	if t.schema != "" {
		t.raw = t.schema + "." + name
	}
	return t
}

// Heartbeat implements [outbox.Membership]: it records relayID as live until
// the database's UTC now + ttl, deletes the rows of relays whose time ran
// out, and returns relayID's rank among the live relays ordered by relay_id
// and how many are live, in two statements (three when some expired). When
// the table of relays is missing (or the user may not write it) it tries to
// create it ([Store.Migrate] does too); when that fails, the error matches
// [outbox.ErrNoMembership] and names the statement to run.
func (s *Store) Heartbeat(ctx context.Context, relayID string, ttl time.Duration) (slot, count int, err error) {
	if relayID == "" || len(relayID) > 64 || ttl <= 0 {
		return 0, 0, fmt.Errorf("mysqlstore: heartbeat: relay id %q (1 to 64 characters) or ttl %v (positive) out of range", relayID, ttl)
	}
	t := s.relaysTable().quoted()
	us := ttl.Microseconds()
	upsert := fmt.Sprintf(relaysUpsertSQL, t)
	_, err = s.db.ExecContext(ctx, upsert, relayID, us, us)
	if noSuchTable(err) || denied(err) { // MySQL says "denied" for a missing table the user has no grant on
		if err = s.createRelays(ctx); err == nil {
			_, err = s.db.ExecContext(ctx, upsert, relayID, us, us)
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("mysqlstore: heartbeat: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, fmt.Sprintf(relaysListSQL, t))
	if err != nil {
		return 0, 0, fmt.Errorf("mysqlstore: heartbeat: %w", err)
	}
	defer rows.Close()
	slot = -1
	var expired []any
	for rows.Next() {
		var id string
		var gone bool
		if err := rows.Scan(&id, &gone); err != nil {
			return 0, 0, fmt.Errorf("mysqlstore: heartbeat: %w", err)
		}
		switch {
		case id == relayID:
			slot = count
		case gone:
			expired = append(expired, id)
			continue
		}
		count++
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("mysqlstore: heartbeat: %w", err)
	}
	rows.Close()
	if slot < 0 { // not seen (cannot happen with one clock): last
		slot, count = count, count+1
	}
	if len(expired) > 0 {
		del := fmt.Sprintf(relaysExpireSQL, t, sqlcore.Placeholders(len(expired)))
		if _, err := s.db.ExecContext(ctx, del, expired...); err != nil {
			return 0, 0, fmt.Errorf("mysqlstore: heartbeat: delete expired relays: %w", err)
		}
	}
	return slot, count, nil
}

// Leave implements [outbox.Membership]: it deletes relayID's row. A missing
// table of relays is no error.
func (s *Store) Leave(ctx context.Context, relayID string) error {
	_, err := s.db.ExecContext(ctx, fmt.Sprintf(relaysLeaveSQL, s.relaysTable().quoted()), relayID)
	if err != nil && !noSuchTable(err) {
		return fmt.Errorf("mysqlstore: leave: %w", err)
	}
	return nil
}

// Relays implements [outbox.RelayLister]: the relays whose time has not run
// out, ordered by relay id (their slots). A missing table of relays is none.
func (s *Store) Relays(ctx context.Context) ([]outbox.RelayInfo, error) {
	rows, err := s.db.QueryContext(ctx, fmt.Sprintf(
		"SELECT relay_id, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), seen_until) FROM %s"+
			" WHERE seen_until >= UTC_TIMESTAMP(6) ORDER BY relay_id", s.relaysTable().quoted()))
	if noSuchTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: relays: %w", err)
	}
	defer rows.Close()
	var out []outbox.RelayInfo
	for rows.Next() {
		var id string
		var left int64
		if err := rows.Scan(&id, &left); err != nil {
			return nil, fmt.Errorf("mysqlstore: relays: %w", err)
		}
		out = append(out, outbox.RelayInfo{ID: id, Left: time.Duration(left) * time.Microsecond})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysqlstore: relays: %w", err)
	}
	return out, nil
}

// createRelays creates the table of relays, or returns an error matching
// outbox.ErrNoMembership that says what to run.
func (s *Store) createRelays(ctx context.Context) error {
	ddl := fmt.Sprintf(relaysDDL, s.relaysTable().quoted())
	if _, err := s.db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("%w: %s is missing (or not writable) and could not be created (%v); run `outbox migrate`, or as a user "+
			"who may: %s", outbox.ErrNoMembership, s.relaysTable().raw, err, strings.ReplaceAll(ddl, "\n", ""))
	}
	return nil
}

// noSuchTable reports whether err is MySQL's "table doesn't exist" (1146).
func noSuchTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}

// denied reports whether err is MySQL's "command denied" (1142).
func denied(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1142
}

// migrateRelays creates the table of relays on Migrate's connection.
func (s *Store) migrateRelays(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(relaysDDL, s.relaysTable().quoted())); err != nil {
		return fmt.Errorf("create table of relays: %w", err)
	}
	return nil
}
