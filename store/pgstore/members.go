package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

var (
	_ outbox.Membership  = (*Store)(nil)
	_ outbox.RelayLister = (*Store)(nil)
)

// relaysSuffix ends the name of a table's table of relays.
const relaysSuffix = "_relays"

// relaysDDL creates the table of relays (%s: its quoted name); seen_until
// is on the database's clock.
const relaysDDL = `CREATE TABLE IF NOT EXISTS %s (
	relay_id varchar(64) PRIMARY KEY,
	seen_until timestamptz NOT NULL
)`

// relaysHeartbeatSQL is Heartbeat's one statement (%[1]s: the table of
// relays; $1 the relay id, $2 the ttl in µs). It upserts the relay's row,
// deletes the rows whose time ran out (other than its own, skipping those
// another heartbeat is deleting), and counts the live relays before it in
// relay id order and all the others, in the statement's snapshot, which
// does not see its own upsert: hence "+ 1" and the relay's own row left out.
const relaysHeartbeatSQL = `WITH up AS (
	INSERT INTO %[1]s AS r (relay_id, seen_until) VALUES ($1, now() + $2::bigint * interval '1 microsecond')
	ON CONFLICT (relay_id) DO UPDATE SET seen_until = EXCLUDED.seen_until
	RETURNING r.relay_id
), gone AS (
	DELETE FROM %[1]s AS r
	WHERE r.relay_id IN (SELECT x.relay_id FROM %[1]s AS x WHERE x.seen_until < now() AND x.relay_id <> $1 FOR UPDATE SKIP LOCKED)
	RETURNING r.relay_id
)
SELECT count(*) FILTER (WHERE l.relay_id COLLATE "C" < $1::text)::integer, count(*)::integer + 1,
	(SELECT count(*) FROM up) + (SELECT count(*) FROM gone)
FROM %[1]s AS l WHERE l.seen_until >= now() AND l.relay_id <> $1`

// RelaysTable returns the quoted name of the table of relays
// ([Store.Heartbeat]): the outbox table's name with "_relays" appended
// (shortened with a hash past 63 bytes), in the same schema.
func (s *Store) RelaysTable() string {
	parts, _ := splitTable(s.cfg.table) // validated by New
	last := len(parts) - 1
	parts[last] = sqlcore.SideName(parts[last], relaysSuffix, 63)
	return pgx.Identifier(parts).Sanitize()
}

// Heartbeat implements [outbox.Membership] in one statement: it records
// relayID as live until the database's now() + ttl, deletes the rows of
// relays whose time ran out, and returns relayID's rank among the live
// relays ordered by relay_id (byte order) and how many are live. When the
// table of relays is missing (or the role may not write it) it tries to
// create it ([Store.Migrate] does too); when that fails, the error matches
// [outbox.ErrNoMembership] and names the statement to run.
func (s *Store) Heartbeat(ctx context.Context, relayID string, ttl time.Duration) (slot, count int, err error) {
	if relayID == "" || len(relayID) > 64 || ttl <= 0 {
		return 0, 0, fmt.Errorf("pgstore: heartbeat: relay id %q (1 to 64 characters) or ttl %v (positive) out of range", relayID, ttl)
	}
	sql := fmt.Sprintf(relaysHeartbeatSQL, s.RelaysTable())
	beat := func() error {
		var changed int64
		return s.pool.QueryRow(ctx, sql, relayID, ttl.Microseconds()).Scan(&slot, &count, &changed)
	}
	err = beat()
	if undefinedTable(err) || insufficientPrivilege(err) {
		if err = s.createRelays(ctx); err == nil {
			err = beat()
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("pgstore: heartbeat: %w", err)
	}
	return slot, count, nil
}

// Leave implements [outbox.Membership]: it deletes relayID's row. A missing
// table of relays is no error.
func (s *Store) Leave(ctx context.Context, relayID string) error {
	_, err := s.pool.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE relay_id = $1", s.RelaysTable()), relayID)
	if err != nil && !undefinedTable(err) {
		return fmt.Errorf("pgstore: leave: %w", err)
	}
	return nil
}

// Relays implements [outbox.RelayLister]: the relays whose time has not run
// out, in slot order. A missing table of relays is none.
func (s *Store) Relays(ctx context.Context) ([]outbox.RelayInfo, error) {
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT relay_id, (EXTRACT(EPOCH FROM seen_until - now()) * 1000000)::bigint
FROM %s WHERE seen_until >= now() ORDER BY relay_id COLLATE "C"`, s.RelaysTable()))
	if undefinedTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: relays: %w", err)
	}
	var out []outbox.RelayInfo
	var id string
	var left int64
	_, err = pgx.ForEachRow(rows, []any{&id, &left}, func() error {
		out = append(out, outbox.RelayInfo{ID: id, Left: time.Duration(left) * time.Microsecond})
		return nil
	})
	if undefinedTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: relays: %w", err)
	}
	return out, nil
}

// createRelays creates the table of relays, or returns an error matching
// outbox.ErrNoMembership that says what to run.
func (s *Store) createRelays(ctx context.Context) error {
	ddl := fmt.Sprintf(relaysDDL, s.RelaysTable())
	if _, err := s.pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("%w: %s is missing (or not writable) and could not be created (%v); run `outbox migrate`, or as a user "+
			"who may: %s", outbox.ErrNoMembership, s.RelaysTable(), err, ddl)
	}
	return nil
}

// undefinedTable reports whether err is PostgreSQL's undefined_table (42P01).
func undefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// insufficientPrivilege reports whether err is PostgreSQL's
// insufficient_privilege (42501).
func insufficientPrivilege(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// relaysDone reports whether the table of relays exists.
func (s *Store) relaysDone(ctx context.Context) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, tableExists, s.RelaysTable()).Scan(&ok); err != nil {
		return false, fmt.Errorf("pgstore: migrate %s: read catalog: %w", s.cfg.table, err)
	}
	return ok, nil
}

// installRelays creates the table of relays in tx, the migration's transaction.
func (s *Store) installRelays(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, fmt.Sprintf(relaysDDL, s.RelaysTable())); err != nil {
		return fmt.Errorf("pgstore: migrate %s: create table of relays: %w", s.cfg.table, err)
	}
	return nil
}
