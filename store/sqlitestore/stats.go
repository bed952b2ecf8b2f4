package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
)

// Stats reports the table's backlog in one read-only statement (one
// consistent snapshot): pending rows (leased ones included) and the age of
// the oldest, dead rows, rows acknowledged in the last minute and hour (by
// updated_at, so only while sent rows are kept), and rows of any other
// status (NULL, or not the integer 0, 1 or 2: SQLite also stores text or
// 1.5 in an INTEGER column), which the relay leaves alone. The pending and
// dead counts use the status indexes; the sent and other counts read every
// sent row, so on a table that keeps many, call it at most every few seconds.
func (s *Store) Stats(ctx context.Context) (*outbox.Stats, error) {
	if _, err := s.columns(ctx, s.db); err != nil {
		return nil, fmt.Errorf("sqlitestore: stats: %w", err)
	}
	t := s.table.quoted()
	now := time.Now()
	q := "SELECT" +
		" (SELECT COUNT(*) FROM " + t + " WHERE status = 0)," +
		" (SELECT MIN(julianday(created_at)) FROM " + t + " WHERE status = 0)," +
		" (SELECT COUNT(*) FROM " + t + " WHERE status = 2)," +
		" (SELECT COUNT(*) FROM " + t + " WHERE status = 1 AND julianday(updated_at) >= julianday(?1))," +
		" (SELECT COUNT(*) FROM " + t + " WHERE status = 1 AND julianday(updated_at) >= julianday(?2))," +
		" (SELECT COUNT(*) FROM " + t + " WHERE status IS NULL OR status NOT IN (0, 1, 2))"
	var (
		st     outbox.Stats
		oldest sql.NullFloat64
	)
	err := s.db.QueryRowContext(ctx, q, formatTime(now.Add(-time.Minute)), formatTime(now.Add(-time.Hour))).
		Scan(&st.Pending, &oldest, &st.Dead, &st.SentLastMinute, &st.SentLastHour, &st.OtherStatus)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: stats: %w", err)
	}
	if oldest.Valid {
		st.OldestPending = max(0, now.Sub(julianToTime(oldest.Float64)))
	}
	return &st, nil
}
