package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

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
	return s.core.Stats(ctx, fmt.Sprintf(statsSQL, s.table.quoted()), nil, func(oldest any) (time.Duration, error) {
		var micros sql.NullInt64 // the text protocol returns text
		err := micros.Scan(oldest)
		return rowcheck.Age(micros.Int64), err
	})
}
