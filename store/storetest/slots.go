package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// slotHashSQL is, by dialect, the SQL of the slot of a row's aggregate
// among 3 that the stores of this module prefer (outbox.ClaimParams.Slot):
// what the store computes, written again so that the suite can check it.
var slotHashSQL = map[Dialect]string{
	Postgres: "(hashtextextended(aggregate_type || '/' || aggregate_id, 0) & 9223372036854775807) % 3",
	MySQL:    "CRC32(CONCAT(aggregate_type, '/', aggregate_id)) MOD 3",
}

// preferring returns the fixture of a store that implements
// outbox.Membership (whose relays ask for slot preferences), or skips.
func (s *suite) preferring(t *testing.T) *fx {
	f := s.fresh(t)
	if _, ok := f.Store.(outbox.Membership); !ok {
		t.Skip("the store keeps no table of relays: no relay asks it for a slot preference")
	}
	return f
}

// orderedStaleSlots runs the ordered claimers of orderedConcurrent with
// views of the relays that disagree: two claimers think they are slot 0 of
// 2, one slot 2 of 3, one has no slot. Order must hold all the same: a
// slot only says which rows a claim looks at first.
func (s *suite) orderedStaleSlots(t *testing.T) {
	s.preferring(t)
	views := [concurrentClaimers][2]int{{0, 2}, {0, 2}, {2, 3}, {0, 0}}
	s.orderedConcurrentWith(t, func(i int) (slot, slots int) { return views[i][0], views[i][1] })
}

// slotPreference writes 30 aggregates of 3 rows each, interleaved, and
// checks that an ordered claim with a slot preference takes the rows of its
// slot's aggregates first (all of them, as runs), then, once those are
// leased, the rows of other aggregates; every claim safe.
func (s *suite) slotPreference(t *testing.T) { s.onBothTables(t, s.checkSlotPreference) }

func (s *suite) checkSlotPreference(t *testing.T, f *fx) {
	if _, ok := f.Store.(outbox.Membership); !ok {
		t.Skip("the store keeps no table of relays: no relay asks it for a slot preference")
	}
	hash, ok := slotHashSQL[s.h.Dialect]
	require.True(t, ok, "no slot hash for dialect %s", s.h.Dialect)
	const aggregates, per = 30, 3
	var msgs []*outbox.Message
	for i := range per {
		for a := range aggregates {
			msgs = append(msgs, newMsg("order", fmt.Sprintf("agg-%d", a), i))
		}
	}
	f.write(msgs...)
	slotOf := map[string]int{}
	rows, err := f.DB.QueryContext(t.Context(), f.sql("SELECT DISTINCT aggregate_id, "+hash+" FROM {t}"))
	require.NoError(t, err)
	bySlot := map[int][]string{}
	for rows.Next() {
		var id string
		var slot int
		require.NoError(t, rows.Scan(&id, &slot))
		slotOf[id] = slot
		bySlot[slot] = append(bySlot[slot], id)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	slot := 0 // the slot with the most aggregates
	for sl := range 3 {
		if len(bySlot[sl]) > len(bySlot[slot]) {
			slot = sl
		}
	}
	mine := bySlot[slot]
	require.GreaterOrEqual(t, len(mine), 4, "aggregates by slot: %v", bySlot)

	r := &runsFx{fx: f}
	p := outbox.ClaimParams{Limit: per * len(mine), Lease: hour, Ordered: true, BlockOnDead: true, Slot: slot, Slots: 3}
	first := r.safeClaim(p)
	var got []string
	for _, m := range first {
		require.Equal(t, slot, slotOf[m.AggregateID], "row %d of %s is not of slot %d", m.RowID, m.AggregateID, slot)
		if !slices.Contains(got, m.AggregateID) {
			got = append(got, m.AggregateID)
		}
	}
	require.Len(t, first, per*len(mine), "every row of the slot's aggregates, as runs")
	require.ElementsMatch(t, mine, got)

	// The slot's rows are leased: the same preference falls back to the others.
	p.Limit = 10
	second := r.safeClaim(p)
	require.Len(t, second, 10, "falls back to the other slots' rows")
	for _, m := range second {
		require.NotEqual(t, slot, slotOf[m.AggregateID], "row %d of %s is of the leased slot", m.RowID, m.AggregateID)
	}
	// Whatever the preference, the rest comes out safe, once what holds it back is sent.
	f.ack(false, append(first, second...)...)
	p.Limit, p.Slot = len(msgs), (slot+1)%3
	rest := r.safeClaim(p)
	require.Len(t, rest, len(msgs)-len(first)-len(second))
}

// relaysTabler is implemented by stores that name their table of relays.
type relaysTabler interface{ RelaysTable() string }

// relaysTable is the fixture's table of relays, as it goes into SQL.
func (f *fx) relaysTable() string {
	f.t.Helper()
	rt, ok := f.Store.(relaysTabler)
	require.True(f.t, ok, "the store does not name its table of relays (RelaysTable)")
	name := rt.RelaysTable()
	if f.h.Dialect == MySQL {
		return "`" + strings.ReplaceAll(name, ".", "`.`") + "`"
	}
	return name
}

// membership checks outbox.Membership: relays rank by id whatever order
// they join in, a relay whose time ran out is removed by the next
// heartbeat, and one that leaves is gone at once.
func (s *suite) membership(t *testing.T) {
	f := s.preferring(t)
	m := f.Store.(outbox.Membership)
	beat := func(id string, ttl time.Duration) [2]int {
		t.Helper()
		slot, n, err := m.Heartbeat(t.Context(), id, ttl)
		require.NoError(t, err, "heartbeat of %s", id)
		return [2]int{slot, n}
	}
	require.Equal(t, [2]int{0, 1}, beat("relay-b", time.Minute), "alone")
	require.Equal(t, [2]int{1, 2}, beat("relay-c", time.Minute))
	require.Equal(t, [2]int{0, 3}, beat("relay-a", time.Minute), "ranked by id, not by arrival")
	for _, tc := range []struct {
		id   string
		want [2]int
	}{{"relay-a", [2]int{0, 3}}, {"relay-b", [2]int{1, 3}}, {"relay-c", [2]int{2, 3}}} {
		require.Equal(t, tc.want, beat(tc.id, time.Minute), tc.id)
	}

	require.Equal(t, [2]int{0, 4}, beat("relay-0", 300*time.Millisecond), "a short-lived relay joins")
	deadline := time.Now().Add(10 * time.Second)
	for beat("relay-a", time.Minute) != [2]int{0, 3} {
		require.True(t, time.Now().Before(deadline), "relay-0 never expired")
		time.Sleep(50 * time.Millisecond) // polling the database's clock, not waiting for a goroutine
	}
	if l, ok := f.Store.(outbox.RelayLister); ok {
		live, err := l.Relays(t.Context())
		require.NoError(t, err)
		var ids []string
		for _, r := range live {
			ids = append(ids, r.ID)
			require.Greater(t, r.Left, 30*time.Second, r.ID)
		}
		require.Equal(t, []string{"relay-a", "relay-b", "relay-c"}, ids, "the expired relay's row is deleted")
	}

	require.NoError(t, m.Leave(t.Context(), "relay-b"))
	require.Equal(t, [2]int{1, 2}, beat("relay-c", time.Minute), "after relay-b left")
	require.NoError(t, m.Leave(t.Context(), "never-joined"))
	_, _, err := m.Heartbeat(t.Context(), "", time.Minute)
	require.Error(t, err, "an empty relay id")

	// A table of relays that is missing: no relays, no error, and made again.
	f.exec("DROP TABLE " + f.relaysTable())
	if l, ok := f.Store.(outbox.RelayLister); ok {
		live, err := l.Relays(t.Context())
		require.NoError(t, err, "a missing table of relays is none")
		require.Empty(t, live)
	}
	require.NoError(t, m.Leave(t.Context(), "relay-c"), "a missing table of relays is no error")
	require.Equal(t, [2]int{0, 1}, beat("relay-c", time.Minute), "the table made again")
}
