package pgcdc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgcdc"
)

// TestStreamsDelayedAndExpired streams a delayed message, one behind it in
// its aggregate, one of another aggregate, and a row another writer left
// already expired: the other aggregate's goes at once, the delayed one and
// the one behind it (ordering on) not before the delayed one's time, and
// the expired row goes dead without being published.
func TestStreamsDelayedAndExpired(t *testing.T) {
	t.Parallel()
	for _, mode := range rowModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, mode.deleted)
			pub := outboxtest.NewPublisher()
			var mu sync.Mutex
			seen := map[string]time.Time{}
			pub.OnDeliver(func(m *outbox.Message) {
				mu.Lock()
				defer mu.Unlock()
				if _, ok := seen[m.MessageID]; !ok {
					seen[m.MessageID] = time.Now()
				}
			})
			r := start(t, e.source(), pub)
			waitStreaming(t, r.src)

			at := time.Now().Add(1500 * time.Millisecond)
			in := []*outbox.Message{
				{AggregateType: "order", AggregateID: "a", EventType: "E", Payload: []byte(`1`), DeliverAt: at},
				{AggregateType: "order", AggregateID: "a", EventType: "E", Payload: []byte(`2`)},
				{AggregateType: "order", AggregateID: "b", EventType: "E", Payload: []byte(`3`), ExpiresAt: time.Now().Add(time.Hour)},
			}
			ctx := context.Background()
			tx, err := e.pool.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, e.writer.Write(ctx, tx, in...))
			require.NoError(t, tx.Commit(ctx))
			_, err = e.pool.Exec(ctx, "INSERT INTO "+e.table+
				" (message_id, aggregate_type, aggregate_id, event_type, payload, expires_at) VALUES ('gone-stale', 'order', 'c', 'E', '4', now() - interval '1 minute')")
			require.NoError(t, err)

			waitAll(t, pub, []string{in[2].MessageID})
			mu.Lock()
			_, early := seen[in[0].MessageID]
			mu.Unlock()
			require.False(t, early && time.Now().Before(at), "the delayed message went before its time")
			waitAll(t, pub, []string{in[0].MessageID, in[1].MessageID})
			mu.Lock()
			require.False(t, seen[in[0].MessageID].Before(at), "delayed message published at %v, before %v", seen[in[0].MessageID], at)
			require.False(t, seen[in[1].MessageID].Before(seen[in[0].MessageID]), "the message behind the delayed one went first")
			mu.Unlock()
			testsvc.Eventually(t, 10*time.Second, func() bool { return e.statusCounts()[2] == 1 },
				"the expired row is not dead: %v", e.statusCounts())
			for _, m := range pub.Messages() {
				require.NotEqual(t, "gone-stale", m.MessageID, "the expired row was published")
			}
			var reason string
			require.NoError(t, e.pool.QueryRow(ctx, "SELECT last_error FROM "+e.table+" WHERE status = 2").Scan(&reason))
			require.Regexp(t, "^expired", reason)
		})
	}
}

// TestStreamsMessageExpiredInTheLog writes an expiring message while no
// source reads the slot and starts one after the expiry: the message,
// read from the log, goes dead unpublished, and its dead row (recorded
// anew when the writer deleted it) keeps its expiry.
func TestStreamsMessageExpiredInTheLog(t *testing.T) {
	t.Parallel()
	for _, mode := range rowModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, mode.deleted)
			ctx := context.Background()
			_, err := pgcdc.Setup(ctx, e.pool, e.table, e.slot, e.pub) // the slot keeps the log from here on
			require.NoError(t, err)
			exp := time.Now().Add(300 * time.Millisecond)
			m := &outbox.Message{AggregateType: "order", AggregateID: "a", EventType: "E", Payload: []byte(`1`), ExpiresAt: exp}
			tx, err := e.pool.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, e.writer.Write(ctx, tx, m))
			require.NoError(t, tx.Commit(ctx))
			testsvc.Eventually(t, 5*time.Second, func() bool { return time.Now().After(exp) }, "the expiry never passed")

			pub := outboxtest.NewPublisher()
			start(t, e.source(), pub)
			testsvc.Eventually(t, 15*time.Second, func() bool { return e.statusCounts()[2] == 1 },
				"the expired message is not dead: %v", e.statusCounts())
			require.Zero(t, pub.Count(), "the expired message was published")
			var reason string
			var expires time.Time
			require.NoError(t, e.pool.QueryRow(ctx, "SELECT last_error, expires_at FROM "+e.table+" WHERE status = 2").
				Scan(&reason, &expires))
			require.Regexp(t, "^expired at ", reason)
			require.WithinDuration(t, exp, expires, time.Millisecond)
		})
	}
}
