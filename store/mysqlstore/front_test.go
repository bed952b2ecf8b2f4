package mysqlstore

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqltest"
)

// TestFrontScan checks step (2) by the front scan (front.go) on its own:
// which runs it gives for the rows a claim locked, and when it gives up.
// Rows are "agg-n", written in the order given.
func TestFrontScan(t *testing.T) {
	t.Parallel()
	five := []string{"a-0", "b-0", "a-1", "b-1", "c-0"}
	twenty := make([]string, 20)
	for i := range twenty {
		twenty[i] = fmt.Sprint("z-", i)
	}
	for _, tc := range []struct {
		name        string
		rows        []string
		dead        []string // marked dead before the claim
		locked      []string // the rows the claim locked
		chain       []string // ClaimParams.Chain
		blockOnDead bool
		limit       int
		want        []string // the rows kept; nil when the scan gives up
	}{
		{name: "EveryRowKnown", rows: five, locked: five, limit: 20, want: five},
		{name: "AnUnknownRowEndsItsRun", rows: five, locked: []string{"a-0", "a-1", "b-1", "c-0"}, limit: 20,
			want: []string{"a-0", "a-1", "c-0"}},
		{name: "ChainedRowsAreKnown", rows: five, locked: []string{"a-0", "a-1", "b-1", "c-0"}, chain: []string{"b-0"},
			limit: 20, want: []string{"a-0", "a-1", "b-1", "c-0"}},
		{name: "AnUnknownRowAfterTheRunEndsNothing", rows: append(five, "a-2"), locked: five, limit: 20, want: five},
		{name: "ADeadRowEndsItsRunWhenDeadRowsBlock", rows: five, dead: []string{"b-0"}, blockOnDead: true,
			locked: []string{"a-0", "a-1", "b-1", "c-0"}, limit: 20, want: []string{"a-0", "a-1", "c-0"}},
		{name: "ADeadRowEndsNothingOtherwise", rows: five, dead: []string{"b-0"},
			locked: []string{"a-0", "a-1", "b-1", "c-0"}, limit: 20, want: []string{"a-0", "a-1", "b-1", "c-0"}},
		{name: "TooManyUnknownRows", rows: append(twenty, five...), locked: five, limit: 20},
		{name: "UnknownRowsUpToTheSlack", rows: append(twenty[:16], five...), locked: five, limit: 20, want: five},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, db := orderedStore(t)
			ctx := t.Context()
			var msgs []*outbox.Message
			for _, r := range tc.rows {
				agg, _, _ := strings.Cut(r, "-")
				msgs = append(msgs, &outbox.Message{MessageID: r, AggregateType: "order", AggregateID: agg, EventType: "E", Payload: []byte("{}")})
			}
			require.NoError(t, sqltest.Write(db, s)(ctx, msgs...))
			ids := map[string]int64{}
			names := map[int64]string{}
			rows, err := db.QueryContext(ctx, "SELECT id, message_id FROM outbox_message")
			require.NoError(t, err)
			for rows.Next() {
				var id int64
				var name string
				require.NoError(t, rows.Scan(&id, &name))
				ids[name], names[id] = id, name
			}
			require.NoError(t, rows.Err())
			for _, d := range tc.dead {
				_, err := db.ExecContext(ctx, "UPDATE outbox_message SET status = 2 WHERE message_id = ?", d)
				require.NoError(t, err)
			}
			p := outbox.ClaimParams{Limit: tc.limit, Ordered: true, BlockOnDead: tc.blockOnDead}
			for _, c := range tc.chain {
				p.Chain = append(p.Chain, ids[c])
			}
			locked, last := map[int64]*lockedRow{}, map[aggKey]int64{}
			for _, l := range tc.locked {
				agg, _, _ := strings.Cut(l, "-")
				r := &lockedRow{id: ids[l], agg: aggKey{"order", agg}}
				locked[r.id], last[r.agg] = r, max(last[r.agg], r.id)
			}
			info, err := s.tableInfo(ctx, db)
			require.NoError(t, err)
			tx, err := db.BeginTx(ctx, s.core.TxOptions)
			require.NoError(t, err)
			defer tx.Rollback() //nolint:errcheck // read only
			pending, ok, err := s.readFront(ctx, tx, info, p, locked, chainSet(p.Chain), last)
			require.NoError(t, err)
			if tc.want == nil {
				require.False(t, ok, "the scan gives up")
				require.EqualValues(t, frontPause, s.frontPaused.Left(), "and the next claims read per aggregate")
				return
			}
			require.True(t, ok)
			kept := runPrefixes(pending, locked, chainSet(p.Chain), p.Limit)
			slices.SortFunc(kept, func(a, b *lockedRow) int { return cmp.Compare(a.id, b.id) })
			var got []string
			for _, r := range kept {
				got = append(got, names[r.id])
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestFrontScanPauses: a Store whose front scan gave up reads per aggregate
// for the next frontPause claims, then tries the scan again; frontNever
// never tries it, frontAlways never pauses.
func TestFrontScanPauses(t *testing.T) {
	t.Parallel()
	s, db := orderedStore(t)
	ctx := t.Context()
	require.NoError(t, sqltest.Write(db, s)(ctx, sqltest.Msg("order", "a")))
	info, err := s.tableInfo(ctx, db)
	require.NoError(t, err)
	var id int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT id FROM outbox_message").Scan(&id))
	locked := map[int64]*lockedRow{id: {id: id, agg: aggKey{"order", "a"}}}
	last := map[aggKey]int64{{"order", "a"}: id}
	p := outbox.ClaimParams{Limit: 10, Ordered: true}
	scans := func(policy frontPolicy, paused int32) bool {
		t.Helper()
		s.front = policy
		s.frontPaused.Start(paused)
		tx, err := db.BeginTx(ctx, s.core.TxOptions)
		require.NoError(t, err)
		defer tx.Rollback() //nolint:errcheck // read only
		_, ok, err := s.readFront(ctx, tx, info, p, locked, chainSet(p.Chain), last)
		require.NoError(t, err)
		return ok
	}
	require.True(t, scans(frontAuto, 0))
	require.False(t, scans(frontAuto, 1), "paused")
	require.Zero(t, s.frontPaused.Left(), "one claim less to wait")
	require.True(t, scans(frontAlways, 5), "never paused")
	require.False(t, scans(frontNever, 0))
	p.Slots = 2
	require.False(t, scans(frontAlways, 0), "slots: the other slots' due rows lie among the claim's")
}

// TestFrontScanSkipsSentRows runs the front scan's statement with ANALYZE
// counters on a table that keeps 4,000 sent rows before 1,000 pending ones:
// it reads the pending rows up to its bound, from the index, and nothing of
// the sent rows.
func TestFrontScanSkipsSentRows(t *testing.T) {
	t.Parallel()
	s, db := orderedStore(t)
	ctx := t.Context()
	writeSentThenPending(t, db, 4000)
	info, err := s.tableInfo(ctx, db)
	require.NoError(t, err)
	p := outbox.ClaimParams{Limit: 50, Ordered: true, BlockOnDead: true}
	got, read := readCost(t, db, s.frontScanSQL(info, p), 4050, 100, 4050, 100)
	require.Equal(t, 50, got, "the pending rows 4001 to 4050")
	require.LessOrEqual(t, read, 60.0, "index entries and rows the front scan read")
}
