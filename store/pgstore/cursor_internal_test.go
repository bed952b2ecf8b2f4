package pgstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// TestClaimCursor walks the cursor through a backlog: full claims move it
// on, a short claim or rescanEvery sends the next claim back to the first
// due row, and concurrent claims only ever move it forward.
func TestClaimCursor(t *testing.T) {
	t.Parallel()
	claimOf := func(ids ...int64) *outbox.Claim {
		c := &outbox.Claim{}
		for _, id := range ids {
			c.Messages = append(c.Messages, &outbox.Message{RowID: id})
		}
		return c
	}
	t0 := time.Unix(1_000_000, 0)
	type step struct {
		at        time.Duration // since t0
		wantStart int64
		claimed   []int64 // the claim's rows (limit 3)
		malformed int64   // a malformed row's id, 0 for none
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"FirstClaimFromTheStart", []step{{0, 0, []int64{1, 2, 3}, 0}, {time.Millisecond, 3, []int64{4, 5, 6}, 0},
			{2 * time.Millisecond, 6, nil, 0}}},
		{"ShortClaimStartsOver", []step{{0, 0, []int64{1, 2, 3}, 0}, {time.Millisecond, 3, []int64{4}, 0},
			{2 * time.Millisecond, 0, []int64{1, 2, 3}, 0}}},
		{"RescanEvery", []step{{0, 0, []int64{1, 2, 3}, 0}, {rescanEvery - time.Millisecond, 3, []int64{4, 5, 6}, 0},
			{rescanEvery, 0, []int64{7, 8, 9}, 0}, {rescanEvery + time.Millisecond, 9, []int64{10, 11, 12}, 0}}},
		{"MalformedRowsCount", []step{{0, 0, []int64{1, 2}, 7}, {time.Millisecond, 7, []int64{8, 9, 10}, 0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := claimCursor{every: rescanEvery}
			for i, s := range tc.steps {
				after := c.start(t0.Add(s.at))
				require.Equal(t, s.wantStart, after, "step %d", i)
				cl := claimOf(s.claimed...)
				if s.malformed != 0 {
					cl.Malformed = []outbox.MalformedRow{{Message: &outbox.Message{RowID: s.malformed}}}
				}
				c.claimed(after, cl, 3)
			}
		})
	}

	// Claims that finish out of order never move the cursor back.
	var c claimCursor
	c.claimed(0, claimOf(7, 8, 9), 3)
	c.claimed(0, claimOf(4, 5, 6), 3)
	require.Equal(t, int64(9), c.after.Load())
}
