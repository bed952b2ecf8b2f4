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
	now := time.Now()
	args := []any{formatTime(now.Add(-time.Minute)), formatTime(now.Add(-time.Hour))}
	return s.core.Stats(ctx, fmt.Sprintf(statsSQL, s.table.quoted()), args, func(oldest any) (time.Duration, error) {
		var julian sql.NullFloat64
		err := julian.Scan(oldest)
		return max(0, now.Sub(julianToTime(julian.Float64))), err
	})
}
