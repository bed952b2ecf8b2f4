package outboxtest

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
)

// FlushAndWait drives relay by hand (Relay.Step) until the store reports no
// pending message that is due, and returns how many messages were sent. It
// returns once everything committed before the call is published, retried
// into the future, or dead. A message waiting out a retry backoff is left
// pending; FlushAndWait then keeps stepping until ctx is done and returns an
// error that says how many are still pending, so give tests short backoffs
// (outbox.WithBackoff) or a deadline. Do not call it while relay.Run runs.
func FlushAndWait(ctx context.Context, relay *outbox.Relay, store outbox.Store) (int, error) {
	sent := 0
	for {
		ev, err := relay.Step(ctx)
		sent += ev.Sent
		if err != nil && ctx.Err() != nil {
			return sent, stillPending(ctx, store)
		}
		if ev.Claimed > 0 {
			continue
		}
		st, serr := store.Stats(ctx)
		if serr != nil && ctx.Err() != nil { // the deadline struck during Stats
			return sent, stillPending(ctx, store)
		}
		if serr != nil {
			return sent, fmt.Errorf("outboxtest: flush: stats: %w", serr)
		}
		if st.Pending == 0 {
			return sent, nil
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return sent, stillPending(ctx, store)
		case <-t.C:
		}
	}
}

// stillPending is FlushAndWait's error once ctx is done: how many messages
// are still pending, read with a short deadline of its own.
func stillPending(ctx context.Context, store outbox.Store) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	st, err := store.Stats(sctx)
	if err != nil {
		return fmt.Errorf("outboxtest: flush: %w (stats: %v)", ctx.Err(), err)
	}
	return fmt.Errorf("outboxtest: flush: %d messages still pending (leased or waiting out a backoff): %w",
		st.Pending, ctx.Err())
}
