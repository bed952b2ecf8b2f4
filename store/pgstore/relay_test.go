package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgstore"
)

// TestRelayWakesOnNotify runs the root package's relay on a pgstore with a
// poll interval of an hour: messages go out within seconds only because the
// store's notifications wake it. A poison message dies; the others are acked.
func TestRelayWakesOnNotify(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	s := newStore(t, pool, pgstore.WithNotify(true))
	pub := outboxtest.NewPublisher()
	pub.FailWith(func(m *outbox.Message) error {
		if m.AggregateID == "poison" {
			return outbox.Permanent(errors.New("rejected"))
		}
		return nil
	})
	relay, err := outbox.NewRelay(s, pub, outbox.WithPollInterval(time.Hour))
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	w := outbox.NewWriter(s)
	write := func(aggIDs ...string) {
		t.Helper()
		msgs := make([]*outbox.Message, len(aggIDs))
		for i, id := range aggIDs {
			msgs[i] = msg(id)
		}
		require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, msgs...) }))
	}
	write("1")
	testsvc.Eventually(t, 10*time.Second, func() bool { return pub.Count() == 1 }, "first message not published")
	// The relay is now asleep for an hour, unless a notification wakes it.
	write("2", "poison", "3")
	testsvc.Eventually(t, 10*time.Second, func() bool { return pub.Count() == 3 }, "later messages not published")
	testsvc.Eventually(t, 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM outbox_message WHERE status = 1`) == 3 &&
			count(t, pool, `SELECT count(*) FROM outbox_message WHERE status = 2 AND aggregate_id = 'poison'`) == 1
	}, "rows not acked and killed")
}
