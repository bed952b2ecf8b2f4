package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

func (s *suite) ordered(t *testing.T) { s.onBothTables(t, s.checkOrdered) }

func (s *suite) checkOrdered(t *testing.T, f *fx) {
	ids := f.write(
		newMsg("order", "A", 1), // 0
		newMsg("order", "B", 1), // 1
		newMsg("order", "A", 2), // 2
		newMsg("user", "A", 1),  // 3: same id, another aggregate type
		newMsg("order", "B", 2), // 4
		newMsg("order", "C", 1), // 5
		newMsg("order", "A", 3), // 6
	)
	ordered := func(limit int, blockOnDead bool) []int64 {
		t.Helper()
		c := f.claim(outbox.ClaimParams{Limit: limit, Lease: time.Hour, Ordered: true, BlockOnDead: blockOnDead})
		require.Empty(t, c.Malformed)
		return rowIDs(c.Messages)
	}
	pick := func(is ...int) []int64 {
		out := make([]int64, len(is))
		for i, n := range is {
			out[i] = ids[n]
		}
		return out
	}

	require.Equal(t, pick(0, 1), ordered(2, true), "the limit applies to heads, in id order")
	require.Equal(t, pick(3, 5), ordered(10, true), "the other heads")
	require.Empty(t, ordered(10, true), "leased heads block their aggregates")

	a1 := &outbox.Message{RowID: ids[0], Attempt: 1}
	require.Equal(t, 1, f.ack(false, a1))
	if s.h.Runs {
		require.Equal(t, pick(2, 6), ordered(10, true), "acking order/A #1 frees the run order/A #2, #3")
		f.reschedule(true, time.Now(), "", &outbox.Message{RowID: ids[6], Attempt: 1}) // as a heads-only claim left it
	} else {
		require.Equal(t, pick(2), ordered(10, true), "acking order/A #1 frees order/A #2")
	}

	f.reschedule(false, time.Now().Add(time.Hour), "retry later", &outbox.Message{RowID: ids[1], Attempt: 1})
	require.Empty(t, ordered(10, true), "a head waiting to retry blocks order/B #2")

	f.kill("poison", &outbox.Message{RowID: ids[2], Attempt: 1})
	require.Empty(t, ordered(10, true), "with BlockOnDead a dead head blocks order/A #3")
	require.Equal(t, pick(6), ordered(10, false), "without BlockOnDead order/A #3 flows")

	c := f.claimN(10)
	require.Equal(t, pick(4), rowIDs(c.Messages), "an unordered claim ignores heads")
}
