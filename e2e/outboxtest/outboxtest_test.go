// Package outboxtest_test here holds the tests of package outboxtest, which need a real store (SQLite). They live in
// the e2e module so that the root module requires no store (docs/modules.md).
package outboxtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

func msgs(n int) []*outbox.Message {
	out := make([]*outbox.Message, n)
	for i := range out {
		out[i] = &outbox.Message{MessageID: fmt.Sprintf("m-%d", i), AggregateType: "order", AggregateID: "1",
			EventType: "E", Payload: []byte(`{}`)}
	}
	return out
}

func TestPublisherRecordsAndFails(t *testing.T) {
	t.Parallel()
	p := outboxtest.NewPublisher()
	var delivered []string
	p.OnDeliver(func(m *outbox.Message) { delivered = append(delivered, m.MessageID) })
	boom := errors.New("boom")
	p.FailWith(func(m *outbox.Message) error {
		if m.MessageID == "m-1" {
			return boom
		}
		return nil
	})
	batch := msgs(3)
	errs := p.Publish(context.Background(), batch)
	require.Equal(t, []error{nil, boom, nil}, errs)
	require.Equal(t, []string{"m-0", "m-2"}, delivered)

	batch[0].Payload = []byte(`{"changed":true}`)
	require.JSONEq(t, `{}`, string(p.Messages()[0].Payload), "the publisher keeps its own copy")

	p.FailWith(nil)
	require.Equal(t, []error{nil, nil, nil}, p.Publish(context.Background(), msgs(3)))
	require.Equal(t, 5, p.Count())
	require.Equal(t, map[string]int{"m-0": 2, "m-2": 2}, p.Duplicates())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs = p.Publish(ctx, msgs(2))
	require.ErrorIs(t, errs[0], context.Canceled)
	require.ErrorIs(t, errs[1], context.Canceled)
	require.Equal(t, 5, p.Count(), "a cancelled publish records nothing")

	p.Reset()
	require.Zero(t, p.Count())
	require.Empty(t, p.Duplicates())
}

// sqliteOutbox is a migrated SQLite outbox with a writer.
func sqliteOutbox(t *testing.T, n int) *sqlitestore.Store {
	t.Helper()
	db, err := sqlitestore.Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	st, err := sqlitestore.New(db)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(t.Context()))
	tx, err := db.Begin()
	require.NoError(t, err)
	ms := msgs(n)
	for _, m := range ms {
		m.MessageID = ""
	}
	require.NoError(t, outbox.NewWriter[*sql.Tx](st).Write(t.Context(), tx, ms...))
	require.NoError(t, tx.Commit())
	return st
}

func TestFlushAndWaitSaysWhatIsStillPending(t *testing.T) {
	t.Parallel()
	st := sqliteOutbox(t, 3)
	p := outboxtest.NewPublisher()
	p.FailWith(func(*outbox.Message) error { return errors.New("broker says no") })
	relay, err := outbox.NewRelay(st, p, outbox.WithBackoff(time.Hour, time.Hour)) // the retry is an hour away
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	sent, err := outboxtest.FlushAndWait(ctx, relay, st)
	require.Zero(t, sent)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "3 messages still pending")
}

func TestCrashBeforePublishCostsAnAttemptNotADuplicate(t *testing.T) {
	t.Parallel()
	st := sqliteOutbox(t, 4)
	crashing := outboxtest.NewCrashingStore(st, outboxtest.CrashBeforePublish, 2)
	p := outboxtest.NewPublisher()
	relay, err := outbox.NewRelay(crashing, p)
	require.NoError(t, err)
	sent, err := outboxtest.FlushAndWait(t.Context(), relay, crashing)
	require.NoError(t, err)
	require.Equal(t, 4, sent)
	require.Equal(t, 2, crashing.Crashes())
	require.Empty(t, p.Duplicates())
	for _, m := range p.Messages() {
		require.Equal(t, 3, m.Attempt, "two crashed claims counted their attempts")
	}
}
