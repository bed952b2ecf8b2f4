package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/rowcheck"
)

// Stats reports the table's backlog in one read-only statement: pending rows
// (leased ones included) and the age of the oldest, dead rows, rows
// acknowledged in the last minute and hour (by updated_at, so only while
// sent rows are kept), and rows of any other status (NULL, or not 0, 1 or
// 2), which the relay leaves alone. Ages are measured against the database's
// UTC clock. The counts go through the status indexes (other statuses as
// index ranges: NULL, below 0, above 2); the oldest pending age and the sent
// counts read the rows they count, so on a large table call it at most every
// few seconds.
func (s *Store) Stats(ctx context.Context) (*outbox.Stats, error) {
	if _, err := s.tableInfo(ctx, s.db); err != nil {
		return nil, fmt.Errorf("mysqlstore: stats: %w", err)
	}
	t := s.table.quoted()
	q := "SELECT" +
		" (SELECT COUNT(*) FROM " + t + " WHERE status = 0)," +
		// A zero date (MariaDB keeps one where sql_mode allows it) would make the age NULL.
		" (SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) FROM " + t +
		" WHERE status = 0 AND created_at >= '0001-01-01')," +
		" (SELECT COUNT(*) FROM " + t + " WHERE status = 2)," +
		" (SELECT COUNT(*) FROM " + t + " WHERE status = 1 AND updated_at >= UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE)," +
		" (SELECT COUNT(*) FROM " + t + " WHERE status = 1 AND updated_at >= UTC_TIMESTAMP(6) - INTERVAL 1 HOUR)," +
		" (SELECT COUNT(*) FROM " + t + " WHERE status IS NULL OR status < 0 OR status > 2)"
	var (
		st     outbox.Stats
		oldest sql.NullInt64
	)
	if err := s.db.QueryRowContext(ctx, q).Scan(&st.Pending, &oldest, &st.Dead, &st.SentLastMinute, &st.SentLastHour, &st.OtherStatus); err != nil {
		return nil, fmt.Errorf("mysqlstore: stats: %w", err)
	}
	if oldest.Valid {
		st.OldestPending = rowcheck.Age(oldest.Int64)
	}
	return &st, nil
}
