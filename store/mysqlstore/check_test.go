package mysqlstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/tablecheck"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/storetest"
)

// handMadeColumns are the columns of pastedDDL, as a hand-made table has them.
var handMadeColumns = map[string]string{
	"id": "BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY", "message_id": "VARCHAR(64)", "aggregate_type": "VARCHAR(64)",
	"aggregate_id": "VARCHAR(64)", "event_type": "VARCHAR(64)", "payload": "JSON",
	"status": "TINYINT NOT NULL DEFAULT 0", "retry_count": "INT NOT NULL DEFAULT 0",
	"next_retry_at": "DATETIME(6) NULL", "created_at": "DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
	"updated_at": "DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
}

func TestCheckTable(t *testing.T) {
	t.Parallel()
	storetest.RunTableChecks(t, storetest.TableHarness{
		New: func(t *testing.T) (func(string), func(string) storetest.CheckedStore) {
			db, _ := openDB(t)
			return func(sql string) {
					_, err := db.ExecContext(t.Context(), sql)
					require.NoError(t, err)
				}, func(table string) storetest.CheckedStore {
					s, err := mysqlstore.New(db, mysqlstore.WithTable(table))
					require.NoError(t, err)
					return s
				}
		},
	}, []storetest.TableCase{
		{Name: "Missing", Table: "outbox_mesage", Want: []string{"table outbox_mesage not found (database t", "outbox migrate"}},
		{Name: "MissingColumns", Table: "t", DDL: tablecheck.CreateTable("t", handMadeColumns, map[string]string{"status": "", "retry_count": "", "payload": ""}),
			Want: []string{"missing contract columns: payload, status, retry_count"}},
		{Name: "TextTypedColumns", Table: "t",
			DDL: tablecheck.CreateTable("t", handMadeColumns, map[string]string{"status": "VARCHAR(8)", "next_retry_at": "VARCHAR(32)", "created_at": "BIGINT", "payload": "JSON", "updated_at": ""}),
			Want: []string{"missing contract columns: updated_at", "column created_at is bigint", "column next_retry_at is varchar(32)",
				"column status is varchar(8)", "ALTER TABLE `t` MODIFY `status` INT"}},
		// A DATE holds no lease: a claimed row would be due again at once.
		{Name: "DateLease", Table: "t", DDL: tablecheck.CreateTable("t", handMadeColumns, map[string]string{"next_retry_at": "DATE NULL"}),
			Want: []string{"column next_retry_at is date", "want DATETIME(6)"}},
		{Name: "ContractTable", Table: "t", DDL: tablecheck.CreateTable("t", handMadeColumns, map[string]string{})},
		{Name: "LooseTypes", Table: "t", DDL: tablecheck.CreateTable("t", handMadeColumns, map[string]string{
			"id": "INT AUTO_INCREMENT PRIMARY KEY", "message_id": "CHAR(36)", "aggregate_type": "TEXT", "aggregate_id": "BIGINT",
			"event_type": "VARBINARY(64)", "payload": "LONGBLOB", "status": "INT NOT NULL DEFAULT 0",
			"retry_count": "SMALLINT NOT NULL DEFAULT 0", "next_retry_at": "TIMESTAMP(6) NULL",
			"created_at": "DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP"})},
	})
}
