package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// orderedRuns checks the runs contract of ordered claims
// (outbox.ClaimParams.Ordered): every claim is safe (a row comes back only
// when every earlier pending, or dead under BlockOnDead, row of its
// aggregate is in the same claim), a leased row, a row in backoff and a
// dead row end their aggregate's run, and, when the harness says the store
// returns runs (Harness.Runs), several rows of an aggregate come back in
// one claim when nothing holds them back. A heads-only store passes the
// rest.
func (s *suite) orderedRuns(t *testing.T) { s.onBothTables(t, s.checkOrderedRuns) }

func (s *suite) checkOrderedRuns(t *testing.T, f *fx) {
	r := &runsFx{fx: f}
	r.nothingBlocks()
	r.leasedRowEndsRun()
	r.backoffEndsRun()
	r.deadRowEndsRun()
	require.Zero(t, f.count(fmt.Sprintf("retry_count > 1 AND aggregate_type = %s", "'run'")), "given-back rows kept their attempts")
}

// runsFx is the fixture of the runs checks, with the helpers they share.
type runsFx struct {
	*fx
}

// ordered claims and checks that the claim is safe: for each row, no
// earlier row of its aggregate is pending (or dead, with blockOnDead)
// outside the claim.
func (f *runsFx) ordered(limit int, blockOnDead bool) []*outbox.Message {
	f.t.Helper()
	return f.safeClaim(outbox.ClaimParams{Limit: limit, Lease: hour, Ordered: true, BlockOnDead: blockOnDead})
}

// safeClaim claims with p (Ordered) and checks that the claim is safe, as
// ordered does.
func (f *runsFx) safeClaim(p outbox.ClaimParams) []*outbox.Message {
	t := f.t
	t.Helper()
	blockOnDead := p.BlockOnDead
	c := f.claim(p)
	require.Empty(t, c.Malformed)
	ids := rowIDs(c.Messages)
	require.True(t, slices.IsSorted(ids), "claim in id order: %v", ids)
	statuses := "0"
	if blockOnDead {
		statuses = "0, 2"
	}
	for _, m := range c.Messages {
		var earlier []int64
		rows, err := f.DB.QueryContext(t.Context(), f.sql("SELECT id FROM {t} WHERE aggregate_type = ? AND aggregate_id = ? AND id < ? AND status IN ("+statuses+")"),
			m.AggregateType, m.AggregateID, m.RowID)
		require.NoError(t, err)
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			earlier = append(earlier, id)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		for _, id := range earlier {
			require.Contains(t, ids, id, "row %d (%s) handed out while earlier row %d is pending outside the claim", m.RowID, m.AggregateID, id)
		}
	}
	return c.Messages
}

// giveBack makes claimed rows due again, their attempts not counted.
func (f *runsFx) giveBack(msgs ...*outbox.Message) {
	f.t.Helper()
	if len(msgs) > 0 {
		f.reschedule(true, time.Now().Add(-time.Second), "", msgs...)
	}
}

// writeRuns writes n rows to each aggregate of aggs, interleaved, and
// returns each aggregate's row ids in order.
func (f *runsFx) writeRuns(aggs []string, n int) map[string][]int64 {
	f.t.Helper()
	var msgs []*outbox.Message
	for i := range n {
		for _, a := range aggs {
			msgs = append(msgs, newMsg("run", a, i))
		}
	}
	ids := f.write(msgs...)
	by := map[string][]int64{}
	for i, m := range msgs {
		by[m.AggregateID] = append(by[m.AggregateID], ids[i])
	}
	return by
}

// drain acknowledges every row that can be claimed.
func (f *runsFx) drain() {
	f.t.Helper()
	for {
		more := f.ordered(100, true)
		if len(more) == 0 {
			return
		}
		f.ack(false, more...)
	}
}

// rowsOf returns the row ids of msgs that belong to aggregate agg.
func rowsOf(msgs []*outbox.Message, agg string) []int64 {
	var out []int64
	for _, m := range msgs {
		if m.AggregateID == agg {
			out = append(out, m.RowID)
		}
	}
	return out
}

// nothingBlocks checks that when nothing blocks, each aggregate gives its
// head, and with runs all of its rows, in one claim.
func (f *runsFx) nothingBlocks() {
	t := f.t
	ids := f.writeRuns([]string{"a", "b", "c"}, 3)
	got := f.ordered(100, true)
	for _, a := range []string{"a", "b", "c"} {
		if f.h.Runs {
			require.Equal(t, ids[a], rowsOf(got, a), "aggregate %s: its whole run in one claim", a)
		} else {
			require.Contains(t, rowIDs(got), ids[a][0], "aggregate %s: at least its head", a)
		}
	}
	require.Empty(t, f.ordered(100, true), "every row of every aggregate is leased or behind a leased row")
	f.ack(false, got...)
	f.drain()
}

// leasedRowEndsRun checks that a row leased by another claim ends its run:
// the claim that follows takes nothing of its aggregate, and the other
// aggregates' runs.
func (f *runsFx) leasedRowEndsRun() {
	t := f.t
	ids := f.writeRuns([]string{"d", "e"}, 3)
	first := f.ordered(1, true)
	require.Equal(t, ids["d"][:1], rowIDs(first), "a claim of 1 takes the oldest head")
	got := f.ordered(100, true)
	require.Empty(t, rowsOf(got, "d"), "d's head is leased: none of d")
	require.Contains(t, rowIDs(got), ids["e"][0], "e flows")
	if f.h.Runs {
		require.Equal(t, ids["e"], rowsOf(got, "e"))
	}
	f.ack(false, append(first, got...)...)
	f.drain()
}

// backoffEndsRun checks that a row in backoff ends its run, whatever
// follows it: the relay's case of a run that failed at its second row and
// gave the rest back.
func (f *runsFx) backoffEndsRun() {
	t := f.t
	ids := f.writeRuns([]string{"f", "g"}, 4)
	got := f.ordered(100, true)
	f1 := ids["f"][0]
	f.ack(false, msgsWithID(got, f1)...)
	if !slices.Contains(rowIDs(got), ids["f"][1]) { // heads only: take f #2 now
		f.giveBack(without(got, f1)...)
		got = f.ordered(100, true)
	}
	f2 := msgsWithID(got, ids["f"][1])
	require.Len(t, f2, 1, "f #2 is claimable once f #1 is acknowledged")
	f.reschedule(false, time.Now().Add(hour), "broker busy", f2...)
	f.giveBack(without(got, f2[0].RowID)...)
	got = f.ordered(100, true)
	require.Empty(t, rowsOf(got, "f"), "f #2 waits out its backoff: f #3 and #4 wait behind it")
	require.Contains(t, rowIDs(got), ids["g"][0], "g flows")
	f.giveBack(got...)
	f.drain()
}

// deadRowEndsRun checks that a dead row ends its run under BlockOnDead,
// and only then.
func (f *runsFx) deadRowEndsRun() {
	t := f.t
	ids := f.writeRuns([]string{"h"}, 3)
	got := f.ordered(100, true)
	h1 := msgsWithID(got, ids["h"][0])
	require.Len(t, h1, 1)
	f.kill("poison", h1...)
	f.giveBack(without(got, h1[0].RowID)...)
	got = f.ordered(100, true)
	require.Empty(t, rowsOf(got, "h"), "dead h #1 blocks h #2 and #3")
	f.giveBack(got...)
	got = f.ordered(100, false)
	require.Contains(t, rowIDs(got), ids["h"][1], "without BlockOnDead h #2 flows")
	if f.h.Runs {
		require.Equal(t, ids["h"][1:], rowsOf(got, "h"), "and h #3 with it")
	}
	f.giveBack(got...)
}

// msgsWithID returns the messages of msgs with row id id (none or one).
func msgsWithID(msgs []*outbox.Message, id int64) []*outbox.Message {
	for _, m := range msgs {
		if m.RowID == id {
			return []*outbox.Message{m}
		}
	}
	return nil
}

// without returns msgs without the row id.
func without(msgs []*outbox.Message, id int64) []*outbox.Message {
	var out []*outbox.Message
	for _, m := range msgs {
		if m.RowID != id {
			out = append(out, m)
		}
	}
	return out
}
