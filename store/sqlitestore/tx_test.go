package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

func TestTx(t *testing.T) {
	store, db := newStore(t)
	w := outbox.NewWriter[*sql.Tx](store)
	count := func() int {
		var n int
		require.NoError(t, db.QueryRowContext(t.Context(), "SELECT count(*) FROM outbox_message").Scan(&n))
		return n
	}
	msg := func(id string) *outbox.Message {
		return &outbox.Message{MessageID: id, AggregateType: "order", AggregateID: "1", EventType: "E", Payload: []byte(`{}`)}
	}

	t.Run("commits", func(t *testing.T) {
		require.NoError(t, store.Tx(t.Context(), func(tx *sql.Tx) error { return w.Write(t.Context(), tx, msg("a")) }))
		require.Equal(t, 1, count())
	})

	t.Run("rolls back on error", func(t *testing.T) {
		boom := errors.New("boom")
		err := store.Tx(t.Context(), func(tx *sql.Tx) error {
			require.NoError(t, w.Write(t.Context(), tx, msg("b")))
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.Equal(t, 1, count(), "the message of a failed transaction is not kept")
	})

	t.Run("queues with the relay's writes", func(t *testing.T) {
		// While a Tx runs, the Store's own writes (a claim here) wait in
		// Go for their turn, and go on when it commits.
		inside, release := make(chan struct{}), make(chan struct{})
		txDone := make(chan error, 1)
		go func() {
			txDone <- store.Tx(t.Context(), func(tx *sql.Tx) error {
				close(inside)
				<-release
				return w.Write(t.Context(), tx, msg("c"))
			})
		}()
		<-inside
		claimed := make(chan int, 1)
		go func() {
			c, err := store.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Minute})
			if err != nil {
				claimed <- -1
				return
			}
			claimed <- len(c.Messages)
		}()
		select {
		case n := <-claimed:
			t.Fatalf("a claim ran (%d messages) while a Tx held the gate", n)
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		require.NoError(t, <-txDone)
		require.Equal(t, 2, <-claimed, "the claim ran after the commit and saw its message")
	})

	t.Run("stops waiting when its context ends", func(t *testing.T) {
		inside, release := make(chan struct{}), make(chan struct{})
		txDone := make(chan error, 1)
		go func() {
			txDone <- store.Tx(t.Context(), func(*sql.Tx) error { close(inside); <-release; return nil })
		}()
		<-inside
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		ran := false
		err := store.Tx(ctx, func(*sql.Tx) error { ran = true; return nil })
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, ran)
		close(release)
		require.NoError(t, <-txDone)
	})
}

// TestOneConnection runs the Store's writes on a pool of one connection,
// as many services on SQLite have: statements prepared while a transaction
// holds that connection must not wait for another.
func TestOneConnection(t *testing.T) {
	store, db := newStore(t)
	db.SetMaxOpenConns(1)
	w := outbox.NewWriter[*sql.Tx](store)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		require.NoError(t, store.Tx(ctx, func(tx *sql.Tx) error {
			return w.Write(ctx, tx, &outbox.Message{MessageID: fmt.Sprint("m", i), AggregateType: "order",
				AggregateID: fmt.Sprint(i), EventType: "E", Payload: []byte(`{}`)})
		}))
	}
	for _, ordered := range []bool{false, true} {
		c, err := store.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Minute, Ordered: ordered})
		require.NoError(t, err)
		if !ordered {
			require.Len(t, c.Messages, 3)
			_, err = store.Ack(ctx, outbox.AckParams{Messages: c.Messages})
			require.NoError(t, err)
		}
	}
}
