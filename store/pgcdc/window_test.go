package pgcdc

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// TestWindowHandsOutCopies claims one entry twice, as after a retry: each
// claim hands out a fresh copy with its own attempt, the earlier copy is
// left as the relay had it, and the window knows the entry by the latest
// copy only.
func TestWindowHandsOutCopies(t *testing.T) {
	w := newWindow(0)
	tx := w.begin()
	e := &entry{msg: &outbox.Message{RowID: 1, AggregateID: "a"}}
	w.add(tx, e)
	w.commit(tx, 100)

	w.handOut(w.candidates(10, true, time.Now()))
	first := e.out
	require.Equal(t, 1, first.Attempt)
	e.state = entryReady // rescheduled, due again
	w.handOut(w.candidates(10, true, time.Now()))
	require.NotSame(t, first, e.out)
	require.Equal(t, 2, e.out.Attempt)
	require.Equal(t, 1, first.Attempt, "the earlier copy is not changed")
	require.Len(t, w.byMsg, 1)
	require.Same(t, e, w.byMsg[e.out])

	w.settle(e)
	require.Empty(t, w.byMsg)
	require.Equal(t, 0, e.msg.Attempt, "the entry's own message is never handed out")
}
