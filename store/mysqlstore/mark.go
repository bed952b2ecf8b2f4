package mysqlstore

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// MaxErrorLength is the most bytes of an error or reason the Store keeps in
// last_error; longer texts are cut at a character boundary.
const MaxErrorLength = sqlcore.MaxErrorLength

// Ack marks the messages sent (status 1), or deletes them when p.Delete, in
// one statement per 1,000 messages (several run in one transaction), fenced
// by each message's Attempt: only a row still pending whose retry_count
// equals the Attempt changes. It returns how many rows changed.
//
// The statement finds the rows by primary key, in id order: WHERE id IN
// (...) AND retry_count = ? when the chunk's messages share one attempt (the
// usual case), else WHERE (id, retry_count) IN ((?, ?), ...). It names the
// primary key (FORCE INDEX) so that, on a table small next to the batch, the
// optimizer does not scan, and lock, every row instead.
func (s *Store) Ack(ctx context.Context, p outbox.AckParams) (int, error) {
	info, err := s.tableInfo(ctx, s.db)
	if err != nil {
		return 0, fmt.Errorf("mysqlstore: ack: %w", err)
	}
	return s.core.Ack(ctx, p, func(ms []*outbox.Message, del bool) (string, []any) { return s.ackSQL(info, del, ms) })
}
