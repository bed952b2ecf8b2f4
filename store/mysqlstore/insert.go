package mysqlstore

import (
	"context"
	"database/sql"

	"github.com/outboxkit/outbox"
)

// InsertTx inserts msgs, already validated by the Writer, in the caller's
// open transaction tx, with one multi-row INSERT per 1,000 messages, rows in
// the order given so that ids follow write order. It does not commit or roll
// back tx. created_at and updated_at are the database's UTC now; Headers,
// Topic and PartitionKey are stored where the table has the column and
// dropped otherwise, and empty ones are NULL. A MessageID already in the
// table fails the call with an error matching [ErrDuplicate]. Safe for
// concurrent use (with distinct transactions).
func (s *Store) InsertTx(ctx context.Context, tx *sql.Tx, msgs []*outbox.Message) error {
	return s.core.InsertTx(ctx, tx, msgs, s.insertSQL)
}
