package mysqlstore

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/store/internal/sqltest"
)

// bareStore returns a Store on a table with the contract's columns and no
// index but its primary key.
func bareStore(t *testing.T) (*Store, *sql.DB) {
	t.Helper()
	return sqltest.OnTable(t, New, testDB(t), `CREATE TABLE outbox_message (
		id BIGINT AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(64) NOT NULL,
		aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL,
		payload LONGTEXT NOT NULL, status INT NOT NULL DEFAULT 0, retry_count INT NOT NULL DEFAULT 0,
		next_retry_at DATETIME(6) NULL, created_at DATETIME(6) NOT NULL, updated_at DATETIME(6) NOT NULL)`)
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
