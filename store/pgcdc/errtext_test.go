package pgcdc_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
)

// TestHostileErrorTextsAreStored: a broker's error text may hold invalid
// UTF-8, NUL bytes and any length, none of which a PostgreSQL text column
// takes as it is. Kept rows still get their retry and their dead letter
// recorded, with last_error valid UTF-8 of at most 4,096 bytes, and the
// stream goes on: the retried message is sent, the refused one is dead.
func TestHostileErrorTextsAreStored(t *testing.T) {
	t.Parallel()
	e := setup(t, false)
	pub := outboxtest.NewPublisher()
	hostile := "broker says \xff\xfe\x00 no " + strings.Repeat("é", 3000) // 6,000+ bytes
	// The failures are armed by what the messages hold, before they are
	// written: the stream may publish a message before write returns its id.
	var mu sync.Mutex
	failed := map[string]bool{}
	pub.FailWith(func(m *outbox.Message) error {
		if m.AggregateID != "a" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		switch strings.ReplaceAll(string(m.Payload), " ", "") { // jsonb prints {"n": 1}
		case `{"n":1}`: // refused
			return outbox.Permanent(errors.New(hostile))
		case `{"n":0}`: // retried
			if !failed[m.MessageID] {
				failed[m.MessageID] = true
				return errors.New(hostile)
			}
		}
		return nil
	})
	r := start(t, e.source(), pub, outbox.WithOrdering(true, outbox.DeadSkips))
	waitStreaming(t, r.src)
	ids := e.write(3, 1, "a")
	retried, refused := ids[0], ids[1]
	more := e.write(2, 1, "b") // written after the failures were armed
	waitAll(t, pub, append([]string{ids[0], ids[2]}, more...))
	testsvc.Eventually(t, 10*time.Second, func() bool { c := e.statusCounts(); return c[1] == 4 && c[2] == 1 },
		"rows not settled: %v", e.statusCounts())
	mu.Lock()
	require.True(t, failed[retried], "the retried message never failed")
	mu.Unlock()

	read := func(id string) (status int, lastErr string) {
		t.Helper()
		require.NoError(t, e.pool.QueryRow(context.Background(),
			"SELECT status, coalesce(last_error, '') FROM "+e.table+" WHERE message_id = $1", id).Scan(&status, &lastErr))
		return status, lastErr
	}
	for _, tc := range []struct {
		id         string
		wantStatus int
	}{{retried, 1}, {refused, 2}} {
		status, lastErr := read(tc.id)
		require.Equal(t, tc.wantStatus, status)
		require.Contains(t, lastErr, "broker says \uFFFD no é", "last_error of %s", tc.id)
		require.NotContains(t, lastErr, "\x00")
		require.LessOrEqual(t, len(lastErr), 4096)
	}
}
