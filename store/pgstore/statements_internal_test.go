package pgstore

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/internal/testsvc"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden")

// goldenColumns are the columns of a migrated table, with their types.
var goldenColumns = map[string]string{
	"id": "bigint", "message_id": "text", "aggregate_type": "text", "aggregate_id": "text", "event_type": "text",
	"payload": "jsonb", "status": "smallint", "retry_count": "integer", "next_retry_at": "timestamp with time zone",
	"created_at": "timestamp with time zone", "updated_at": "timestamp with time zone", "headers": "jsonb",
	"topic": "text", "partition_key": "text", "last_error": "text", "content_type": "text", "payload_bytes": "bytea",
	"deliver_at": "timestamp with time zone", "expires_at": "timestamp with time zone",
}

// goldenMapping renames every contract column, Debezium's names for the
// message's (as the tests of package pgstore_test do).
var goldenMapping = colmap.Map{
	"id": "ob_id", "message_id": "ob_message_id", "aggregate_type": "aggregatetype", "aggregate_id": "aggregateid",
	"event_type": "type", "payload": "payload", "status": "ob_status", "retry_count": "ob_retry_count",
	"next_retry_at": "ob_next_retry_at", "created_at": "ob_created_at", "updated_at": "ob_updated_at",
	"headers": "ob_headers", "topic": "ob_topic", "partition_key": "ob_partition_key", "last_error": "ob_last_error",
	"content_type": "ob_content_type", "payload_bytes": "ob_payload_bytes", "deliver_at": "ob_deliver_at",
	"expires_at": "ob_expires_at",
}

// statementDump lists, for each set of options, every statement a Store
// builds for a table with cols: claims, settling, insert, stats, ordered
// and runs claims, batch-lease and held claims.
func statementDump(t *testing.T, cols map[string]string, m *colmap.Rewriter) string {
	var b strings.Builder
	add := func(name, sql string) { fmt.Fprintf(&b, "-- %s\n%s\n\n", name, m.SQL(sql)) }
	for _, opt := range []struct {
		name string
		opt  buildOptions
	}{
		{"plain", buildOptions{utf8: true}},
		{"async", buildOptions{utf8: true, asyncCommit: true}},
	} {
		q, err := buildQueries(`"outbox_message"`, cols, opt.opt)
		require.NoError(t, err)
		async := ""
		if opt.opt.asyncCommit {
			async = asyncCommitFilter
		}
		p := opt.name + ": "
		add(p+"columnList", q.columnList)
		add(p+"insert", q.insert)
		add(p+"insertNotify", q.insertNotify)
		for i, c := range q.claim {
			add(fmt.Sprintf("%sclaim %d", p, i), c)
		}
		add(p+"claimStatus", q.claimStatus)
		add(p+"ack", q.ack)
		add(p+"del", q.del)
		add(p+"reschedule", q.reschedule)
		add(p+"kill", q.kill)
		add(p+"stats", q.stats)
		for i, oq := range buildOrderedQueries(`"outbox_message"`, q, async) {
			add(fmt.Sprintf("%sordered %d walk", p, i), oq.walk)
			add(fmt.Sprintf("%sordered %d headsFrom", p, i), oq.headsFrom)
			add(fmt.Sprintf("%sordered %d headsUpTo", p, i), oq.headsUpTo)
			add(fmt.Sprintf("%sordered %d byStatus", p, i), oq.byStatus)
			add(fmt.Sprintf("%sordered %d byStatusAll", p, i), oq.byStatusAll)
		}
		for i, oq := range buildSlotOrderedQueries(`"outbox_message"`, q, async) {
			add(fmt.Sprintf("%sslot ordered %d walk", p, i), oq.walk)
			add(fmt.Sprintf("%sslot ordered %d headsFrom", p, i), oq.headsFrom)
			add(fmt.Sprintf("%sslot ordered %d headsUpTo", p, i), oq.headsUpTo)
			add(fmt.Sprintf("%sslot ordered %d byStatus", p, i), oq.byStatus)
			add(fmt.Sprintf("%sslot ordered %d byStatusAll", p, i), oq.byStatusAll)
		}
		for _, head := range []bool{false, true} {
			for i, rq := range buildRunsQueries(`"outbox_message"`, q, head, async) {
				add(fmt.Sprintf("%sruns %d head index %v fromCursor", p, i, head), rq.fromCursor)
				add(fmt.Sprintf("%sruns %d head index %v byStatus", p, i, head), rq.byStatus)
				add(fmt.Sprintf("%sruns %d head index %v slotFromCursor", p, i, head), rq.slotFromCursor)
				add(fmt.Sprintf("%sruns %d head index %v slotByStatus", p, i, head), rq.slotByStatus)
			}
		}
		if m == nil { // not available with a mapping
			opt.opt.leaseTable, opt.opt.heldClaims = `"outbox_message_lease"`, false
			lq, err := buildQueries(`"outbox_message"`, cols, opt.opt)
			require.NoError(t, err)
			for i, c := range lq.lease.claim {
				add(fmt.Sprintf("%sbatch-lease claim %d", p, i), c)
			}
			add(p+"batch-lease recover", lq.lease.recover)
			opt.opt.leaseTable, opt.opt.heldClaims = "", true
			hq, err := buildQueries(`"outbox_message"`, cols, opt.opt)
			require.NoError(t, err)
			add(p+"held claim", hq.held.claim)
			add(p+"held claimStatus", hq.held.claimStatus)
		}
	}
	return b.String()
}

// TestStatementsGolden checks every statement the Store builds against
// testdata: without a mapping, byte for byte what the Store ran before
// WithColumns (statements.golden was written before the mapping came);
// with one, the same statements with the mapped names.
func TestStatementsGolden(t *testing.T) {
	for _, tc := range []struct {
		file string
		m    *colmap.Rewriter
	}{
		{"statements.golden", nil},
		{"statements_mapped.golden", colmap.NewRewriter(goldenMapping, colmap.PostgreSQL)},
	} {
		t.Run(tc.file, func(t *testing.T) {
			testsvc.Golden(t, tc.file, statementDump(t, goldenColumns, tc.m), *updateGolden)
		})
	}
}

// TestMapperRewrite checks what the PostgreSQL rewriter renames and what it leaves.
func TestMapperRewrite(t *testing.T) {
	m := colmap.NewRewriter(colmap.Map{"id": "ob_id", "status": "ob_status", "payload": "payload"}, colmap.PostgreSQL)
	for _, tc := range []struct{ in, want string }{
		{"SELECT o.id FROM t AS o WHERE status = 0", `SELECT o."ob_id" FROM t AS o WHERE "ob_status" = 0`},
		{"a(id, attempt) id2 _id", `a("ob_id", attempt) id2 _id`},
		{`'id' "id" 'it''s id' "a""id"`, `'id' "id" 'it''s id' "a""id"`},
		{"$max_payload $1 status$x", "$max_payload $1 status$x"},
		{"payload::text -- id\nid", "\"payload\"::text -- id\n\"ob_id\""},
		{`COLLATE "C" 'unterminated id`, `COLLATE "C" 'unterminated id`},
	} {
		require.Equal(t, tc.want, m.SQL(tc.in), tc.in)
		require.Equal(t, tc.want, m.SQL(m.SQL(tc.in)), "twice: "+tc.in)
	}
	swap := colmap.NewRewriter(colmap.Map{"id": "message_id", "message_id": "id"}, colmap.PostgreSQL) // Debezium's id is the message id
	require.Equal(t, `SELECT "message_id", "id" FROM t WHERE "message_id" > $1`,
		swap.SQL("SELECT id, message_id FROM t WHERE id > $1"))
	var none *colmap.Rewriter
	require.Equal(t, "SELECT id", none.SQL("SELECT id"))
}

// TestCoreStatementsPrepare prepares on PostgreSQL, numbered as poolRunner
// runs them, the statements sqlcore builds for the Store (the dead-letter
// admin with every filter), on a migrated table and on one without the
// optional columns.
func TestCoreStatementsPrepare(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _, _ := testsvc.PostgresSchema(t)
	_, err := pool.Exec(ctx, `CREATE TABLE bare (id bigint PRIMARY KEY, message_id text, aggregate_type text,
	aggregate_id text, event_type text, payload jsonb, status smallint, retry_count integer,
	next_retry_at timestamptz, created_at timestamptz, updated_at timestamptz)`)
	require.NoError(t, err)
	for _, table := range []string{DefaultTable, "bare"} {
		s, err := New(pool, WithTable(table))
		require.NoError(t, err)
		if table == DefaultTable {
			require.NoError(t, s.Migrate(ctx))
		}
		q, err := s.queriesFor(ctx, s.poolRow)
		require.NoError(t, err)
		stmts, err := s.core.Statements(q.Columns, s.ident) // an archive with the table's columns
		require.NoError(t, err)
		for name, sql := range stmts {
			_, err := pool.Exec(ctx, "PREPARE p AS "+numbered(sql)+"; DEALLOCATE p")
			require.NoError(t, err, "%s: %s", name, numbered(sql))
		}
	}
}
