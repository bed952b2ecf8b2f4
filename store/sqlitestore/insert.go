package sqlitestore

import (
	"context"
	"database/sql"
	"time"

	"github.com/outboxkit/outbox"
)

// ErrDuplicate is returned (wrapped) by InsertTx when a message's MessageID
// is already in the table. Check it with errors.Is.
var ErrDuplicate = outbox.ErrDuplicate

// InsertTx inserts msgs, already validated by the Writer, in the caller's
// open transaction tx, with one multi-row INSERT per 1000 messages. It does
// not commit or roll back tx. Headers, Topic and PartitionKey are stored
// where the table has the column and dropped otherwise; empty ones are NULL.
// A MessageID already in the table fails the call with [ErrDuplicate].
// Safe for concurrent use (with distinct transactions).
func (s *Store) InsertTx(ctx context.Context, tx *sql.Tx, msgs []*outbox.Message) error {
	return s.core.InsertTx(ctx, tx, msgs, s.insertSQL, formatTime(time.Now()))
}
