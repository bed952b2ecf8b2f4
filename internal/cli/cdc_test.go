package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgcdc"
)

// cdcDB is a migrated PostgreSQL schema with a slot name of its own (also
// its publication's), dropped when t ends.
type cdcDB struct {
	pool *pgxpool.Pool
	dsn  string
	slot string
}

// newCDCDB runs `outbox migrate --cdc` on a fresh schema.
func newCDCDB(t *testing.T) cdcDB {
	t.Helper()
	pool, _, dsn := testsvc.PostgresSchema(t)
	db := cdcDB{pool: pool, dsn: dsn, slot: testsvc.PostgresSlot(t)}
	r := run(t.Context(), db.cdcArgs("migrate", "--cdc")...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	return db
}

// testWait bounds the waits of the CDC command tests.
const testWait = 10 * time.Second

// args is cmd with the database and the slot's name.
func (db cdcDB) args(cmd ...string) []string {
	return append(cmd, "--db", db.dsn, "--cdc-slot", db.slot)
}

// cdcArgs is args and the publication's name, for migrate and the cdc commands.
func (db cdcDB) cdcArgs(cmd ...string) []string {
	return append(db.args(cmd...), "--cdc-publication", db.slot)
}

func (db cdcDB) slotState(t *testing.T) pgcdc.SlotState {
	t.Helper()
	st, err := pgcdc.SlotStatus(t.Context(), db.pool, db.slot)
	require.NoError(t, err)
	return st
}

func (db cdcDB) publications(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, db.pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_publication WHERE pubname = $1", db.slot).Scan(&n))
	return n
}

func TestMigrateCDC(t *testing.T) {
	t.Parallel()
	pool, _, dsn := testsvc.PostgresSchema(t)
	slot := testsvc.PostgresSlot(t)
	args := []string{"migrate", "--cdc", "--db", dsn, "--cdc-slot", slot, "--cdc-publication", slot}

	r := run(t.Context(), args...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 5, r.stdout)
	require.Equal(t, "migrated table outbox_message (postgres)", lines[0])
	require.Equal(t, "created publication "+slot+" (inserts of outbox_message)", lines[1])
	require.Regexp(t, `^created replication slot `+slot+` \(pgoutput\) at [0-9A-F]+/[0-9A-F]+$`, lines[2])
	require.Equal(t, "created table "+pgcdc.MarkTable+" (each slot's mark of first attempts)", lines[3])
	require.Contains(t, lines[4], "outbox cdc drop-slot")

	r = run(t.Context(), args...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.NotContains(t, r.stdout, "created table", "the mark table is made once")
	require.Contains(t, r.stdout, "publication "+slot+" (inserts of outbox_message) exists\n")
	require.Contains(t, r.stdout, "replication slot "+slot+" exists\n")

	st, err := pgcdc.SlotStatus(t.Context(), pool, slot)
	require.NoError(t, err)
	require.True(t, st.Exists)

	t.Run("RefusesRoleWithoutReplication", func(t *testing.T) {
		pool, schema, dsn := testsvc.PostgresSchema(t)
		slot := testsvc.PostgresSlot(t)
		role := slot + "_role"
		_, err := pool.Exec(t.Context(), fmt.Sprintf("CREATE ROLE %s LOGIN NOREPLICATION; GRANT ALL ON SCHEMA %s TO %s", role, schema, role))
		require.NoError(t, err)
		t.Cleanup(func() {
			_, err := pool.Exec(context.Background(), fmt.Sprintf("DROP OWNED BY %s; DROP ROLE %s", role, role))
			require.NoError(t, err)
		})
		dsn = strings.Replace(dsn, "postgres://postgres@", "postgres://"+role+"@", 1)
		r := run(t.Context(), "migrate", "--cdc", "--db", dsn, "--cdc-slot", slot, "--cdc-publication", slot)
		require.Equal(t, ExitRuntime, r.code, r.stderr)
		line := requireOneLine(t, r)
		require.Contains(t, line, "set up cdc on outbox_message: pgcdc: the role lacks REPLICATION")
		require.Contains(t, line, `ALTER ROLE "`+role+`" REPLICATION;`)
		require.Equal(t, "migrated table outbox_message (postgres)\n", r.stdout, "the table is migrated, no slot made")
		st, err := pgcdc.SlotStatus(t.Context(), pool, slot)
		require.NoError(t, err)
		require.False(t, st.Exists)
	})

	t.Run("RefusesOtherDatabases", func(t *testing.T) {
		sqlite := "sqlite://" + testsvc.SQLitePath(t)
		for _, args := range [][]string{
			{"migrate", "--cdc", "--db", sqlite},
			{"cdc", "status", "--db", sqlite},
			{"cdc", "drop-slot", "--yes", "--db", sqlite},
		} {
			r := run(t.Context(), args...)
			require.Equal(t, ExitUsage, r.code, "%v: %s", args, r.stderr)
			require.Contains(t, requireOneLine(t, r), "CDC is for PostgreSQL only: MySQL and MariaDB stay on polling")
			require.Empty(t, r.stdout, "%v did nothing", args)
		}
	})
}

func TestStatusShowsSlot(t *testing.T) {
	t.Parallel()
	db := newCDCDB(t)

	// source polling: the slot is shown because it exists.
	st := statusOf(t, db.args()...)
	require.NotNil(t, st.CDCSlot)
	require.Equal(t, db.slot, st.CDCSlot.Slot)
	require.True(t, st.CDCSlot.Exists)
	require.False(t, st.CDCSlot.Active)
	require.NotNil(t, st.CDCSlot.LagBytes)
	require.Contains(t, []string{pgcdc.WALReserved, pgcdc.WALExtended}, st.CDCSlot.WALStatus)

	r := run(t.Context(), db.args("status")...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^cdc slot\s+`+db.slot+`$`, r.stdout)
	require.Regexp(t, `(?m)^slot active\s+no$`, r.stdout)
	require.Regexp(t, `(?m)^slot lag\s+\d`, r.stdout)
	require.Regexp(t, `(?m)^slot wal status\s+(reserved|extended)$`, r.stdout)

	pid := testsvc.StreamPostgresSlot(t, db.slot, db.slot)
	testsvc.Eventually(t, testWait, func() bool {
		st := statusOf(t, db.args()...)
		return st.CDCSlot != nil && st.CDCSlot.Active && st.CDCSlot.ActivePID == pid
	}, "status never showed the slot active")
	r = run(t.Context(), db.args("status")...)
	require.Regexp(t, fmt.Sprintf(`(?m)^slot active\s+yes \(server process %d\)$`, pid), r.stdout)

	// source polling and no such slot: nothing about slots.
	none := "nope_" + db.slot
	st = statusOf(t, "--db", db.dsn, "--cdc-slot", none)
	require.Nil(t, st.CDCSlot)
	r = run(t.Context(), "status", "--json", "--db", db.dsn, "--cdc-slot", none)
	require.NotContains(t, r.stdout, "cdc_slot")
	// source cdc: the missing slot is news.
	st = statusOf(t, "--db", db.dsn, "--cdc-slot", none, "--source", "cdc")
	require.Equal(t, &pgcdc.SlotState{Slot: none}, st.CDCSlot)
	r = run(t.Context(), "status", "--db", db.dsn, "--cdc-slot", none, "--source", "cdc")
	require.Regexp(t, `(?m)^slot exists\s+no: run outbox migrate --cdc$`, r.stdout)

	// outbox cdc status says the same.
	r = run(t.Context(), db.cdcArgs("cdc", "status", "--json")...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	var cs pgcdc.SlotState
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &cs))
	require.True(t, cs.Active)
	require.Equal(t, pid, cs.ActivePID)
	r = run(t.Context(), db.cdcArgs("cdc", "status")...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^slot active\s+yes`, r.stdout)
}

func TestCDCDropSlot(t *testing.T) {
	t.Parallel()

	t.Run("Confirmation", func(t *testing.T) {
		t.Parallel()
		db := newCDCDB(t)
		r := runIn(t.Context(), notATerminal(t), db.cdcArgs("cdc", "drop-slot")...)
		require.Equal(t, ExitUsage, r.code, r.stderr)
		require.Contains(t, requireOneLine(t, r), "stdin is not a terminal, so nobody can confirm; pass --yes")
		require.True(t, db.slotState(t).Exists)

		r = runIn(t.Context(), strings.NewReader("n\n"), db.cdcArgs("cdc", "drop-slot")...)
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Equal(t, "not confirmed; nothing changed\n", r.stdout)
		require.Regexp(t, `^drop replication slot `+db.slot+` \(lag \d.*\)\? \[y/N\] $`, r.stderr)
		require.True(t, db.slotState(t).Exists)

		r = runIn(t.Context(), strings.NewReader("y\n"), db.cdcArgs("cdc", "drop-slot")...)
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Equal(t, "dropped replication slot "+db.slot+"\n", r.stdout)
		require.False(t, db.slotState(t).Exists)
		require.Equal(t, 1, db.publications(t), "the publication is kept without --drop-publication")

		r = run(t.Context(), db.cdcArgs("cdc", "drop-slot", "--yes")...)
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Equal(t, "no replication slot "+db.slot+"; nothing dropped\n", r.stdout)
	})

	t.Run("ActiveNeedsForce", func(t *testing.T) {
		t.Parallel()
		db := newCDCDB(t)
		pid := testsvc.StreamPostgresSlot(t, db.slot, db.slot)
		testsvc.Eventually(t, testWait, func() bool { return db.slotState(t).Active }, "the slot never read active")

		r := run(t.Context(), db.cdcArgs("cdc", "drop-slot", "--yes", "--drop-publication")...)
		require.Equal(t, ExitRuntime, r.code, r.stderr)
		line := requireOneLine(t, r)
		require.Contains(t, line, fmt.Sprintf("is streamed by server process %d", pid))
		require.Contains(t, line, "--force")
		require.True(t, db.slotState(t).Exists)
		require.Equal(t, 1, db.publications(t))

		r = run(t.Context(), db.cdcArgs("cdc", "drop-slot", "--yes", "--force", "--drop-publication")...)
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Equal(t, "dropped replication slot "+db.slot+"\ndropped publication "+db.slot+"\n", r.stdout)
		require.False(t, db.slotState(t).Exists)
		require.Zero(t, db.publications(t))
	})
}
