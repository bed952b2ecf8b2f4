package mysqlstore

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// TestStatementsPrepare prepares, on the server, every statement the Store
// builds, for each shape of table its statements depend on: a statement
// that does not parse, or names a column or index the table lacks, fails
// here rather than in the first claim that runs it.
func TestStatementsPrepare(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		open func(*testing.T) (*Store, *sql.DB)
	}{
		{"Migrated", orderedStore},
		{"ContractOnly", contractStore},
		{"NoIndexes", bareStore},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, db := c.open(t)
			info, err := s.tableInfo(t.Context(), db)
			require.NoError(t, err)
			_, err = s.ensureArchive(t.Context())
			require.NoError(t, err)
			core, err := s.core.Statements(info.Columns, s.archiveTable().quoted())
			require.NoError(t, err)
			require.NoError(t, sqlcore.Prepare(t.Context(), db, core, s.statements(info)))
		})
	}
}

// bareStore returns a Store on a table with the contract's columns and no
// index but its primary key.
func bareStore(t *testing.T) (*Store, *sql.DB) {
	t.Helper()
	db := testDB(t)
	_, err := db.Exec(`CREATE TABLE outbox_message (
		id BIGINT AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(64) NOT NULL,
		aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL,
		payload LONGTEXT NOT NULL, status INT NOT NULL DEFAULT 0, retry_count INT NOT NULL DEFAULT 0,
		next_retry_at DATETIME(6) NULL, created_at DATETIME(6) NOT NULL, updated_at DATETIME(6) NOT NULL)`)
	require.NoError(t, err)
	s, err := New(db)
	require.NoError(t, err)
	return s, db
}

// statements returns, by name, the statements the Store builds itself (not
// through sqlcore) for a table with info.
func (s *Store) statements(info tableInfo) map[string]string {
	t := s.table.quoted()
	out := map[string]string{
		"lease":         s.leaseSQL(info) + " WHERE id IN (?, ?)",
		"reschedule":    s.rescheduleSQL(info.Columns, false, 2),
		"refund":        s.rescheduleSQL(info.Columns, true, 2),
		"kill":          s.killSQL(info.Columns, 2),
		"insert":        s.insertSQL(sqlcore.InsertColumns(info.Columns), 2),
		"stats":         fmt.Sprintf(statsSQL, t),
		"payload sizes": fmt.Sprintf(payloadSizesSQL(t, sqlcore.SelectColumns(info.Columns)), "?, ?"),
		"columns":       columnsSQL,
		"indexes":       indexesSQL,
		"primary key":   primaryKeySQL,
		"database":      databaseSQL,
		"migrate lock":  migrateLockSQL,
		"migrate free":  migrateUnlockSQL,
		"archive any":   fmt.Sprintf(archiveAnySQL, t),
		"archive pick":  fmt.Sprintf(archivePick, t),
		"archive like":  fmt.Sprintf(archiveCreate, t, s.archiveTable().quoted()),
		"archive add":   fmt.Sprintf(archiveAddColumn, t, s.archiveTable().quoted(), "`x`", "INT"),
	}
	same := []*outbox.Message{{RowID: 1, Attempt: 1}, {RowID: 2, Attempt: 1}}
	mixed := []*outbox.Message{{RowID: 1, Attempt: 1}, {RowID: 2, Attempt: 2}}
	for _, del := range []bool{false, true} {
		out[fmt.Sprintf("ack delete=%v", del)], _ = s.ackSQL(info, del, same)
		out[fmt.Sprintf("ack mixed delete=%v", del)], _ = s.ackSQL(info, del, mixed)
	}
	for _, p := range sqlcore.ClaimVariants() {
		name := fmt.Sprintf("claim ordered=%v block=%v payload=%d", p.Ordered, p.BlockOnDead, p.MaxPayload)
		qs, sel := s.claimSQLs(info, p)
		for i, q := range qs {
			out[fmt.Sprintf("%s lock %d", name, i)] = q
		}
		if !p.Ordered {
			continue
		}
		out[name+" runs"] = s.runsSQL(info, p, 2)
		if ord := s.orderedClaimSQL(info, p, sel); ord != nil {
			out[name+" bound"], out[name+" walk"], out[name+" heads"] = ord.bound, ord.walk, ord.heads
		}
	}
	return out
}

// TestParseTime: go-sql-driver's times (parseTime=true) are read by their
// wall clock, in UTC, whatever the DSN's loc; text as MySQL writes it.
func TestParseTime(t *testing.T) {
	want := time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC)
	for _, v := range []any{
		time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.FixedZone("x", 3600)),
		[]byte("2024-01-02 03:04:05.123456"),
		"2024-01-02 03:04:05.123456",
	} {
		got, ok := dialect.ParseTime(v)
		require.True(t, ok, "%v", v)
		require.Equal(t, want, got)
	}
	_, ok := dialect.ParseTime(nil)
	require.False(t, ok)
}
