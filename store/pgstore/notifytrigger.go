package pgstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// notifyTriggerName is the name of the trigger WithNotifyTrigger installs
// (trigger names are per table, so one name serves every table).
const notifyTriggerName = "outbox_notify"

// insertChannel is the channel the Store's next insert statement notifies:
// none when notifications are off, when the table's trigger sends them, or
// when another write notified less than WithNotifyInterval ago.
func (s *Store) insertChannel() string {
	if !s.cfg.notify || s.cfg.notifyTrigger {
		return ""
	}
	if s.cfg.notifyEvery > 0 {
		now := time.Now().UnixNano()
		next := s.nextNotify.Load()
		if now < next || !s.nextNotify.CompareAndSwap(next, now+int64(s.cfg.notifyEvery)) {
			return ""
		}
	}
	return s.channel
}

// notifyFunction returns the quoted name of the trigger's function: the
// table's name with a _notify suffix, in the table's schema.
func (s *Store) notifyFunction() string {
	parts, _ := splitTable(s.cfg.table) // validated by New
	last := len(parts) - 1
	parts[last] = sqlcore.SideName(parts[last], "_notify", 63)
	return pgx.Identifier(parts).Sanitize()
}

// hasNotifyTrigger says whether table $1 has the trigger named $2.
const hasNotifyTrigger = `SELECT EXISTS (SELECT 1 FROM pg_trigger
	WHERE tgrelid = to_regclass($1) AND tgname = $2 AND NOT tgisinternal)`

// notifyTriggerDone reports whether the table has the NOTIFY trigger, or
// needs none.
func (s *Store) notifyTriggerDone(ctx context.Context) (bool, error) {
	if !s.cfg.notifyTrigger {
		return true, nil
	}
	var ok bool
	err := s.pool.QueryRow(ctx, hasNotifyTrigger, s.ident, notifyTriggerName).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("pgstore: migrate %s: read catalog: %w", s.cfg.table, err)
	}
	return ok, nil
}

// installNotifyTrigger creates (or replaces) the trigger function and the
// statement-level trigger in tx, the migration's transaction.
func (s *Store) installNotifyTrigger(ctx context.Context, tx pgx.Tx) error {
	if !s.cfg.notifyTrigger {
		return nil
	}
	fn := s.notifyFunction()
	// The channel is made of a validated table name; quote it as a literal all the same.
	channel := "'" + strings.ReplaceAll(s.channel, "'", "''") + "'"
	sql := fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $outbox$
BEGIN
	PERFORM pg_notify(%[2]s, '');
	RETURN NULL;
END
$outbox$;
DROP TRIGGER IF EXISTS %[3]s ON %[4]s;
CREATE TRIGGER %[3]s AFTER INSERT ON %[4]s FOR EACH STATEMENT EXECUTE FUNCTION %[1]s();`,
		fn, channel, pgx.Identifier{notifyTriggerName}.Sanitize(), s.ident)
	if _, err := tx.Exec(ctx, sql); err != nil {
		return fmt.Errorf("pgstore: migrate %s: install notify trigger: %w", s.cfg.table, err)
	}
	return nil
}
