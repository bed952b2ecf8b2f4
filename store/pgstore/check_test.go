package pgstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/tablecheck"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/storetest"
)

// handMadeColumns are the columns of contractDDL, as a hand-made table has them.
var handMadeColumns = map[string]string{
	"id": "bigserial PRIMARY KEY", "message_id": "varchar(64)", "aggregate_type": "varchar(64)",
	"aggregate_id": "varchar(64)", "event_type": "varchar(64)", "payload": "jsonb",
	"status": "smallint NOT NULL DEFAULT 0", "retry_count": "int NOT NULL DEFAULT 0",
	"next_retry_at": "timestamptz NULL", "created_at": "timestamptz NOT NULL DEFAULT now()",
	"updated_at": "timestamptz NOT NULL DEFAULT now()",
}

func TestCheckTable(t *testing.T) {
	t.Parallel()
	storetest.RunTableChecks(t, storetest.TableHarness{
		New: func(t *testing.T) (func(string), func(string) storetest.CheckedStore) {
			pool, _, _ := testsvc.PostgresSchema(t)
			return func(sql string) { exec(t, pool, sql) }, func(table string) storetest.CheckedStore {
				s, err := pgstore.New(pool, pgstore.WithTable(table))
				require.NoError(t, err)
				return s
			}
		},
	}, []storetest.TableCase{
		{Name: "Missing", Table: "outbox_mesage",
			Want: []string{"table outbox_mesage not found in the schemas of search_path", "outbox migrate"}},
		{Name: "MissingSchema", Table: "nowhere.outbox_message", Want: []string{"table nowhere.outbox_message not found in schema nowhere"}},
		{Name: "MissingColumns", Table: "t", DDL: tablecheck.CreateTable("t", handMadeColumns, map[string]string{"status": "", "retry_count": "", "payload": ""}),
			Want: []string{"missing contract columns: payload, status, retry_count", "docs/table-contract.md"}},
		{Name: "ByteaPayload", Table: "t", DDL: tablecheck.CreateTable("t", handMadeColumns, map[string]string{"payload": "bytea"}),
			Want: []string{"column payload is bytea", "want jsonb",
				`ALTER TABLE "t" ALTER COLUMN payload TYPE jsonb USING convert_from(payload, 'UTF8')::jsonb`}},
		{Name: "TextTypedColumns", Table: "t",
			DDL: tablecheck.CreateTable("t", handMadeColumns, map[string]string{"status": "text", "next_retry_at": "text", "created_at": "text", "id": "text", "event_type": "bytea"}),
			Want: []string{"column created_at is text", "column event_type is bytea", "column id is text",
				"column next_retry_at is text", "column status is text", "TYPE integer USING status::integer"}},
		{Name: "EveryProblemAtOnce", Table: "t", DDL: tablecheck.CreateTable("t", handMadeColumns, map[string]string{"payload": "bytea", "updated_at": ""}),
			Want: []string{"missing contract columns: updated_at", "column payload is bytea"}},
		{Name: "IntegerID", Table: "t", DDL: tablecheck.CreateTable("t", handMadeColumns, map[string]string{"id": "serial PRIMARY KEY"}),
			Want: []string{"column id is integer", "TYPE bigint USING id::bigint"}},
		{Name: "ContractTable", Table: "t", DDL: tablecheck.CreateTable("t", handMadeColumns, map[string]string{})},
		{Name: "LooseTypes", Table: "t", DDL: tablecheck.CreateTable("t", handMadeColumns, map[string]string{
			"message_id": "uuid", "aggregate_type": "text", "aggregate_id": "bigint",
			"event_type": "char(9)", "payload": "text", "status": "integer NOT NULL DEFAULT 0",
			"retry_count": "bigint NOT NULL DEFAULT 0", "next_retry_at": "timestamp NULL",
			"created_at": "timestamp(3) NOT NULL DEFAULT now()", "updated_at": "timestamp NOT NULL DEFAULT now()"})},
	})
}

func TestCheckTableAfterMigrate(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	for _, opt := range []pgstore.Option{pgstore.WithBatchLease(true), pgstore.WithHeldClaims(true)} {
		s, err := pgstore.New(pool, opt)
		require.NoError(t, err)
		require.NoError(t, s.Migrate(t.Context()))
		require.NoError(t, s.CheckTable(t.Context()))
	}
	// The batch-lease side table is what Migrate adds for WithBatchLease:
	// without it the relay's claim cannot run.
	exec(t, pool, tablecheck.CreateTable("bare", handMadeColumns, nil))
	s, err := pgstore.New(pool, pgstore.WithTable("bare"), pgstore.WithBatchLease(true))
	require.NoError(t, err)
	require.ErrorContains(t, s.CheckTable(t.Context()), "batch-lease claim): ERROR: relation \"bare_lease\" does not exist")
}
