package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

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
	if len(msgs) == 0 {
		return nil
	}
	cols, err := s.columns(ctx, tx)
	if err != nil {
		return fmt.Errorf("sqlitestore: insert: %w", err)
	}
	names := []string{"message_id", "aggregate_type", "aggregate_id", "event_type", "payload"}
	if cols.headers {
		names = append(names, "headers")
	}
	if cols.topic {
		names = append(names, "topic")
	}
	if cols.partitionKey {
		names = append(names, "partition_key")
	}
	now := formatTime(time.Now())
	for lo := 0; lo < len(msgs); lo += s.chunk {
		chunk := msgs[lo:min(lo+s.chunk, len(msgs))]
		// ?1 is now; each row's values follow, numbered explicitly.
		args := make([]any, 1, 1+len(chunk)*len(names))
		args[0] = now
		var b strings.Builder
		b.WriteString("INSERT INTO " + s.table.quoted() + " (" + strings.Join(names, ", ") +
			", status, retry_count, created_at, updated_at) VALUES ")
		for i, m := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('(')
			row, err := rowValues(m, cols)
			if err != nil {
				return fmt.Errorf("sqlitestore: insert message %d: %w", lo+i, err)
			}
			for _, v := range row {
				args = append(args, v)
				b.WriteString("?" + strconv.Itoa(len(args)) + ", ")
			}
			b.WriteString("0, 0, ?1, ?1)")
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			var se *sqlite.Error
			if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE {
				err = fmt.Errorf("%w: %w", ErrDuplicate, err)
			}
			return fmt.Errorf("sqlitestore: insert %d messages: %w", len(chunk), err)
		}
	}
	return nil
}

// rowValues returns a message's values in the order of the insert's columns.
func rowValues(m *outbox.Message, cols columns) ([]any, error) {
	row := []any{m.MessageID, m.AggregateType, m.AggregateID, m.EventType, string(m.Payload)}
	if cols.headers {
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
	if cols.topic {
		row = append(row, nullIfEmpty(m.Topic))
	}
	if cols.partitionKey {
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
