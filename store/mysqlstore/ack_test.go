package mysqlstore

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
	"github.com/outboxkit/outbox/store/internal/sqltest"
)

// openInternal returns a migrated Store on a database of t's own.
func openInternal(t *testing.T, opts ...Option) (*Store, *sql.DB) {
	t.Helper()
	return sqltest.Migrated(t, New, testDB(t), opts...)
}

// TestAckMixedAttempts acknowledges, across statement boundaries, a batch
// whose messages carry different attempts, some of them stale: only the
// rows whose retry_count is the message's attempt change, in both of Ack's
// statement shapes and with Delete.
func TestAckMixedAttempts(t *testing.T) {
	t.Parallel()
	for _, del := range []bool{false, true} {
		t.Run(fmt.Sprintf("Delete=%v", del), func(t *testing.T) {
			t.Parallel()
			s, db := openInternal(t, withChunkRows(40))
			ctx := t.Context()
			const n = 150
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			msgs := make([]*outbox.Message, n)
			for i := range msgs {
				msgs[i] = &outbox.Message{MessageID: fmt.Sprint("m", i), AggregateType: "order",
					AggregateID: fmt.Sprint(i), EventType: "E", Payload: []byte(`{}`)}
			}
			require.NoError(t, s.InsertTx(ctx, tx, msgs))
			require.NoError(t, tx.Commit())
			// Every odd row is one attempt further: claimed twice.
			_, err = db.ExecContext(ctx, "UPDATE outbox_message SET retry_count = 1 WHERE id % 2 = 1")
			require.NoError(t, err)
			c, err := s.Claim(ctx, outbox.ClaimParams{Limit: n, Lease: time.Hour})
			require.NoError(t, err)
			require.Len(t, c.Messages, n)

			var batch []*outbox.Message
			want := 0
			for i, m := range c.Messages {
				require.Equal(t, 1+int(m.RowID%2), m.Attempt)
				if i%5 == 4 { // a stale copy, as from a relay that lost its lease
					stale := *m
					stale.Attempt--
					batch = append(batch, &stale)
					continue
				}
				batch = append(batch, m)
				want++
			}
			got, err := s.Ack(ctx, outbox.AckParams{Messages: batch, Delete: del})
			require.NoError(t, err)
			require.Equal(t, want, got)
			var changed, kept int
			if del {
				require.NoError(t, db.QueryRow("SELECT ? - COUNT(*) FROM outbox_message", n).Scan(&changed))
			} else {
				require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM outbox_message WHERE status = 1").Scan(&changed))
			}
			require.Equal(t, want, changed)
			require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM outbox_message WHERE status = 0").Scan(&kept))
			require.Equal(t, n-want, kept, "the stale copies left their rows pending")

			again, err := s.Ack(ctx, outbox.AckParams{Messages: batch, Delete: del})
			require.NoError(t, err)
			require.Zero(t, again, "a second ack changes nothing")
		})
	}
}

// TestPrimaryKeyPlans checks that Ack's statements (both shapes, updating or
// deleting) and the claim's lease UPDATE read the rows by primary key even
// where the batch is a third of the table, where the optimizer would
// otherwise scan (and lock) every row.
func TestPrimaryKeyPlans(t *testing.T) {
	t.Parallel()
	s, db := openInternal(t)
	ctx := t.Context()
	_, err := db.ExecContext(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, status)
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 999)
		SELECT CONCAT('m', i), 'order', CONCAT('a', i % 100), 'E', '{}', IF(i < 300, 1, 0) FROM n`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE TABLE outbox_message")
	require.NoError(t, err)

	info, err := s.tableInfo(ctx, db)
	require.NoError(t, err)
	require.True(t, info.pkID)
	for _, c := range []struct{ lease, mixed, del bool }{
		{false, false, false}, {false, true, false}, {false, false, true}, {false, true, true}, {true, false, false},
	} {
		var ms []*outbox.Message
		for id := int64(400); id < 700; id++ {
			attempt := 1
			if c.mixed && id%2 == 0 {
				attempt = 2
			}
			ms = append(ms, &outbox.Message{RowID: id, Attempt: attempt})
		}
		q, args := s.ackSQL(info, c.del, ms)
		if c.lease {
			q = s.leaseSQL(info) + " WHERE id IN (" + sqlcore.Placeholders(len(ms)) + ")"
			args = []any{int64(30e6)}
			for _, m := range ms {
				args = append(args, m.RowID)
			}
		}
		rows, err := db.QueryContext(ctx, "EXPLAIN "+q, args...)
		require.NoError(t, err)
		var plan []map[string]string
		cols, err := rows.Columns()
		require.NoError(t, err)
		for rows.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			line := map[string]string{}
			for i, c := range cols {
				line[strings.ToLower(c)] = vals[i].String
			}
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		rows.Close()
		require.Len(t, plan, 1, "%+v: %v", c, plan)
		require.Equal(t, "range", plan[0]["type"], "%+v: %v", c, plan)
		require.Equal(t, "PRIMARY", plan[0]["key"], "%+v: %v", c, plan)
	}
}
