package sqlitestore

import (
	"context"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// chunkRows is how many messages one Ack, Reschedule, Kill or INSERT
// statement covers; a larger batch runs as several statements in one
// transaction. SQLite allows 32766 parameters per statement.
const chunkRows = 1000

// MaxErrorLength is the most bytes of an error or reason the Store keeps in
// last_error; longer texts are cut at a character boundary.
const MaxErrorLength = sqlcore.MaxErrorLength

// Ack marks the messages sent (status 1), or deletes them when p.Delete, in
// one statement per 1000 messages, fenced by each message's Attempt: only a
// row still pending whose retry_count equals the Attempt changes. It returns
// how many rows changed.
func (s *Store) Ack(ctx context.Context, p outbox.AckParams) (int, error) {
	return s.core.Ack(ctx, p, s.ackSQL)
}
