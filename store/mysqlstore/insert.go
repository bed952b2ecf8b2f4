package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

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
	if len(msgs) == 0 {
		return nil
	}
	info, err := s.tableInfo(ctx, tx)
	if err != nil {
		return fmt.Errorf("mysqlstore: insert: %w", err)
	}
	names := []string{"message_id", "aggregate_type", "aggregate_id", "event_type", "payload"}
	if info.headers {
		names = append(names, "headers")
	}
	if info.topic {
		names = append(names, "topic")
	}
	if info.partitionKey {
		names = append(names, "partition_key")
	}
	row := "(" + placeholders(len(names)) + ", 0, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"
	head := "INSERT INTO " + s.table.quoted() + " (" + strings.Join(names, ", ") +
		", status, retry_count, created_at, updated_at) VALUES "
	for lo := 0; lo < len(msgs); lo += s.chunk {
		chunk := msgs[lo:min(lo+s.chunk, len(msgs))]
		args := make([]any, 0, len(chunk)*len(names))
		for i, m := range chunk {
			vals, err := rowValues(m, info)
			if err != nil {
				return fmt.Errorf("mysqlstore: insert message %d: %w", lo+i, err)
			}
			args = append(args, vals...)
		}
		q := head + strings.TrimSuffix(strings.Repeat(row+", ", len(chunk)), ", ")
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			if isMySQLError(err, errDupEntry) {
				err = fmt.Errorf("%w: %w", ErrDuplicate, err)
			}
			return fmt.Errorf("mysqlstore: insert %d messages: %w", len(chunk), err)
		}
	}
	return nil
}

// rowValues returns a message's values in the order of the insert's columns.
func rowValues(m *outbox.Message, info tableInfo) ([]any, error) {
	row := []any{m.MessageID, m.AggregateType, m.AggregateID, m.EventType, string(m.Payload)}
	if info.headers {
		var h any
		if len(m.Headers) > 0 {
			b, err := json.Marshal(m.Headers)
			if err != nil {
				return nil, fmt.Errorf("encode headers: %w", err)
			}
			h = string(b)
		}
		row = append(row, h)
	}
	if info.topic {
		row = append(row, nullIfEmpty(m.Topic))
	}
	if info.partitionKey {
		row = append(row, nullIfEmpty(m.PartitionKey))
	}
	return row, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
