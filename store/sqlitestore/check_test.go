package sqlitestore_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

func TestCheckTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		table string
		ddl   string   // run before the check
		want  []string // what the error says; none: the table is fine
	}{
		{name: "Missing", table: "outbox_mesage", want: []string{"table outbox_mesage not found", "outbox migrate"}},
		{name: "MissingColumns", table: "t",
			ddl:  `CREATE TABLE t (id INTEGER PRIMARY KEY, message_id TEXT, payload BLOB, created_at TEXT)`,
			want: []string{"missing contract columns: aggregate_type, aggregate_id, event_type, status, retry_count, next_retry_at, updated_at"}},
		{name: "ContractTable", table: "t", ddl: fmt.Sprintf(contractDDL, "t")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db, _ := openDB(t)
			if tt.ddl != "" {
				_, err := db.ExecContext(t.Context(), tt.ddl)
				require.NoError(t, err)
			}
			s, err := sqlitestore.New(db, sqlitestore.WithTable(tt.table))
			require.NoError(t, err)
			err = s.CheckTable(t.Context())
			if len(tt.want) == 0 {
				require.NoError(t, err)
				return
			}
			var te *outbox.TableError
			require.True(t, errors.As(err, &te), "got %v", err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}
