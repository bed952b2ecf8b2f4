package pgcdc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testsvc"
)

func TestSlotName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 70)
	for _, tc := range []struct {
		table, slot, publication string
	}{
		{"outbox_message", "outbox_outbox_message", "outbox_outbox_message_pub"},
		{"shop.outbox_message", "outbox_shop_outbox_message", "outbox_shop_outbox_message_pub"},
		{"Shop.Out-box", "outbox__hop__ut_box", "outbox__hop__ut_box_pub"},
		{long, "outbox_" + long[:56], "outbox_" + long[:56]},
		{long[:54], "outbox_" + long[:54], "outbox_" + long[:54] + "_p"},
	} {
		t.Run(tc.table, func(t *testing.T) {
			require.Equal(t, tc.slot, SlotName(tc.table))
			require.Equal(t, tc.publication, PublicationName(tc.table))
			require.LessOrEqual(t, len(SlotName(tc.table)), 63)
			require.Regexp(t, slotNameRE, SlotName(tc.table))
		})
	}
}

// TestServerCheck covers the refusals a shared test server cannot be put
// in (wal_level replica, every slot taken): each names its fix.
func TestServerCheck(t *testing.T) {
	t.Parallel()
	ok := server{walLevel: "logical", role: "relay", replication: true, maxSlots: 10, usedSlots: 3}
	for _, tc := range []struct {
		name string
		edit func(*server)
		is   []error
		fix  []string
	}{
		{"Ready", func(*server) {}, nil, nil},
		{"WALReplica", func(s *server) { s.walLevel = "replica" },
			[]error{ErrWALLevel}, []string{"(it is replica)", "ALTER SYSTEM SET wal_level = logical", "restart PostgreSQL"}},
		{"NoReplication", func(s *server) { s.replication = false; s.role = "Relay" },
			[]error{ErrNoReplication}, []string{`ALTER ROLE "Relay" REPLICATION`}},
		{"SlotsExhausted", func(s *server) { s.usedSlots = 10 },
			[]error{ErrNoFreeSlot}, []string{"all 10 of max_replication_slots", "outbox cdc drop-slot", "raise max_replication_slots"}},
		{"SlotsExhaustedButOursExists", func(s *server) { s.usedSlots, s.slotExists = 10, true }, nil, nil},
		{"Everything", func(s *server) { s.walLevel, s.replication, s.usedSlots = "minimal", false, 12 },
			[]error{ErrWALLevel, ErrNoReplication, ErrNoFreeSlot}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.edit(&s)
			err := s.check()
			if tc.is == nil {
				require.NoError(t, err)
				return
			}
			for _, want := range tc.is {
				require.ErrorIs(t, err, want)
			}
			for _, fix := range tc.fix {
				require.ErrorContains(t, err, fix)
			}
		})
	}
}

func TestCheckNames(t *testing.T) {
	t.Parallel()
	require.NoError(t, checkNames("outbox_x", "Any Name"))
	require.ErrorContains(t, checkNames("Outbox", "p"), `slot name "Outbox"`)
	require.ErrorContains(t, checkNames(strings.Repeat("s", 64), "p"), "1 to 63")
	require.ErrorContains(t, checkNames("s", ""), `publication name ""`)
	_, err := quoteTable("a.b.c")
	require.ErrorContains(t, err, "more than two parts")
}

// setup gives t a schema with a table "outbox_message" and returns a pool,
// the schema-qualified table and a slot name (also the publication's) that
// is dropped when t ends.
func setup(t *testing.T) (*pgxpool.Pool, string, string) {
	t.Helper()
	pool, schema, _ := testsvc.PostgresSchema(t)
	table := schema + ".outbox_message"
	_, err := pool.Exec(context.Background(), "CREATE TABLE "+table+" (id bigserial PRIMARY KEY, payload text)")
	require.NoError(t, err)
	return pool, table, testsvc.PostgresSlot(t)
}

func TestSetup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CreatesThenFindsBoth", func(t *testing.T) {
		t.Parallel()
		pool, table, slot := setup(t)
		res, err := Setup(ctx, pool, table, slot, slot)
		require.NoError(t, err)
		require.True(t, res.CreatedPublication)
		require.True(t, res.CreatedSlot)
		require.NotEmpty(t, res.LSN)

		var ins, upd, del, trunc bool
		var tables []string
		require.NoError(t, pool.QueryRow(ctx, `
SELECT pubinsert, pubupdate, pubdelete, pubtruncate,
       (SELECT array_agg(schemaname || '.' || tablename) FROM pg_publication_tables WHERE pubname = $1)
FROM pg_publication WHERE pubname = $1`, slot).Scan(&ins, &upd, &del, &trunc, &tables))
		require.Equal(t, []bool{true, false, false, false}, []bool{ins, upd, del, trunc}, "inserts only")
		require.Equal(t, []string{table}, tables)
		var plugin, kind string
		require.NoError(t, pool.QueryRow(ctx, `SELECT plugin, slot_type FROM pg_replication_slots WHERE slot_name = $1`,
			slot).Scan(&plugin, &kind))
		require.Equal(t, "pgoutput/logical", plugin+"/"+kind)
		require.True(t, res.CreatedMarkTable)
		schema, _, _ := strings.Cut(table, ".")
		var mark *string
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1)::text", schema+"."+MarkTable).Scan(&mark))
		require.NotNil(t, mark, "the mark table is in the outbox table's schema")

		again, err := Setup(ctx, pool, table, slot, slot)
		require.NoError(t, err)
		require.Equal(t, SetupResult{}, again, "the second run finds both")
	})

	t.Run("ConcurrentRunsAgree", func(t *testing.T) {
		t.Parallel()
		pool, table, slot := setup(t)
		errs := make(chan error, 3)
		created := make(chan SetupResult, 3)
		for range 3 {
			go func() {
				res, err := Setup(ctx, pool, table, slot, slot)
				errs <- err
				created <- res
			}()
		}
		var pubs, slots int
		for range 3 {
			require.NoError(t, <-errs)
			res := <-created
			pubs += boolInt(res.CreatedPublication)
			slots += boolInt(res.CreatedSlot)
		}
		require.Equal(t, 1, slots, "one run created the slot")
		require.LessOrEqual(t, pubs, 1)
	})

	t.Run("RefusesForeignPublication", func(t *testing.T) {
		t.Parallel()
		pool, table, slot := setup(t)
		other := strings.TrimSuffix(table, "outbox_message") + "other"
		_, err := pool.Exec(ctx, "CREATE TABLE "+other+" (id int)")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "CREATE PUBLICATION "+slot+" FOR TABLE "+other)
		require.NoError(t, err)
		_, err = Setup(ctx, pool, table, slot, slot)
		require.ErrorContains(t, err, "does not publish table "+table)
		require.ErrorContains(t, err, `ALTER PUBLICATION "`+slot+`" ADD TABLE`)
		requireNoSlot(t, pool, slot)
	})

	t.Run("RefusesPublicationWithoutInserts", func(t *testing.T) {
		t.Parallel()
		pool, table, slot := setup(t)
		_, err := pool.Exec(ctx, "CREATE PUBLICATION "+slot+" FOR TABLE "+table+" WITH (publish = 'delete')")
		require.NoError(t, err)
		_, err = Setup(ctx, pool, table, slot, slot)
		require.ErrorContains(t, err, "does not publish inserts")
		requireNoSlot(t, pool, slot)
	})

	t.Run("RefusesMissingTable", func(t *testing.T) {
		t.Parallel()
		pool, table, slot := setup(t)
		_, err := Setup(ctx, pool, table+"_nope", slot, slot)
		require.ErrorContains(t, err, "does not exist: run outbox migrate first")
		requireNoSlot(t, pool, slot)
	})

	t.Run("RefusesRoleWithoutReplication", func(t *testing.T) {
		t.Parallel()
		pool, table, slot := setup(t)
		role := slot + "_role"
		_, err := pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN NOREPLICATION")
		require.NoError(t, err)
		t.Cleanup(func() {
			_, err := pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
			require.NoError(t, err)
		})
		conn, err := pgx.Connect(ctx, strings.Replace(testsvc.PostgresURL(), "postgres://postgres@", "postgres://"+role+"@", 1))
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = Setup(ctx, conn, table, slot, slot)
		require.ErrorIs(t, err, ErrNoReplication)
		require.ErrorContains(t, err, `ALTER ROLE "`+role+`" REPLICATION;`)
		requireNoSlot(t, pool, slot)
		var pubs int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_publication WHERE pubname = $1", slot).Scan(&pubs))
		require.Zero(t, pubs, "a refusal creates nothing")
	})
}

func requireNoSlot(t *testing.T, db Querier, slot string) {
	t.Helper()
	st, err := SlotStatus(context.Background(), db, slot)
	require.NoError(t, err)
	require.False(t, st.Exists, "no slot %s was created", slot)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestSlotStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, slot := setup(t)

	st, err := SlotStatus(ctx, pool, slot)
	require.NoError(t, err)
	require.Equal(t, SlotState{Slot: slot}, st, "no slot yet")

	_, err = Setup(ctx, pool, table, slot, slot)
	require.NoError(t, err)
	st, err = SlotStatus(ctx, pool, slot)
	require.NoError(t, err)
	require.True(t, st.Exists)
	require.False(t, st.Active)
	require.Zero(t, st.ActivePID)
	require.Contains(t, []string{WALReserved, WALExtended}, st.WALStatus)
	require.NotNil(t, st.LagBytes)

	// Log written after the slot's confirmed point is lag.
	before := *st.LagBytes
	_, err = pool.Exec(ctx, "INSERT INTO "+table+" (payload) SELECT repeat('x', 1000) FROM generate_series(1, 200)")
	require.NoError(t, err)
	st, err = SlotStatus(ctx, pool, slot)
	require.NoError(t, err)
	require.Greater(t, *st.LagBytes, before+200*1000, "the inserts are lag")

	var keep string
	require.NoError(t, pool.QueryRow(ctx, "SHOW max_slot_wal_keep_size").Scan(&keep))
	if keep == "-1" {
		require.Nil(t, st.SafeWALSize, "no limit, no safe size")
	} else {
		require.NotNil(t, st.SafeWALSize)
	}

	pid := testsvc.StreamPostgresSlot(t, slot, slot)
	testsvc.Eventually(t, 5*time.Second, func() bool {
		st, err = SlotStatus(ctx, pool, slot)
		return err == nil && st.Active
	}, "the slot never read active")
	require.Equal(t, pid, st.ActivePID)
}

func TestDropSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	for _, tc := range []struct {
		name        string
		publication string // what DropSlot is given
		pubLeft     int
	}{
		{"SlotOnly", "", 1},
		{"WithPublication", "same", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, table, slot := setup(t)
			_, err := Setup(ctx, pool, table, slot, slot)
			require.NoError(t, err)
			pub := tc.publication
			if pub == "same" {
				pub = slot
			}
			schema, _, _ := strings.Cut(table, ".")
			marks := schema + "." + MarkTable
			_, err = pool.Exec(ctx, "INSERT INTO "+marks+" (slot, lsn, seq) VALUES ($1, 1, 0), ('other_slot', 2, 0)", slot)
			require.NoError(t, err)
			require.NoError(t, DropSlot(ctx, pool, slot, pub))
			requireNoSlot(t, pool, slot)
			var left []string
			require.NoError(t, pool.QueryRow(ctx, "SELECT array_agg(slot ORDER BY slot) FROM "+marks).Scan(&left))
			require.Equal(t, []string{"other_slot"}, left, "the dropped slot's mark is gone, no other")
			var pubs int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_publication WHERE pubname = $1", slot).Scan(&pubs))
			require.Equal(t, tc.pubLeft, pubs)

			err = DropSlot(ctx, pool, slot, slot)
			require.ErrorIs(t, err, ErrSlotNotFound)
		})
	}

	t.Run("RefusesActive", func(t *testing.T) {
		t.Parallel()
		pool, table, slot := setup(t)
		_, err := Setup(ctx, pool, table, slot, slot)
		require.NoError(t, err)
		pid := testsvc.StreamPostgresSlot(t, slot, slot)
		err = DropSlot(ctx, pool, slot, slot)
		require.ErrorIs(t, err, ErrSlotActive)
		require.ErrorContains(t, err, fmt.Sprint(pid))
		require.ErrorContains(t, err, "stop the relay")
		st, err := SlotStatus(ctx, pool, slot)
		require.NoError(t, err)
		require.True(t, st.Exists, "an active slot is kept")
	})
}

func TestStopStreaming(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, slot := setup(t)
	_, err := Setup(ctx, pool, table, slot, slot)
	require.NoError(t, err)

	ended, err := StopStreaming(ctx, pool, slot)
	require.NoError(t, err)
	require.False(t, ended, "nobody streamed it")

	testsvc.StreamPostgresSlot(t, slot, slot)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ended, err = StopStreaming(wctx, pool, slot)
	require.NoError(t, err)
	require.True(t, ended)
	st, err := SlotStatus(ctx, pool, slot)
	require.NoError(t, err)
	require.False(t, st.Active, "inactive once it returned")
	require.NoError(t, DropSlot(ctx, pool, slot, slot))
}
