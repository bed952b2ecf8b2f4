package outbox_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
)

// deadHook records the errors of the messages the relay marked dead.
type deadHook struct {
	mu   sync.Mutex
	errs []error
}

func (h *deadHook) OnMessage(ev outbox.MessageEvent) {
	if ev.Result == outbox.ResultDead {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.errs = append(h.errs, ev.Err)
	}
}

// delayBundle is a relay over a MemoryStore and a recording publisher.
type delayBundle struct {
	store *outboxtest.MemoryStore
	pub   *outboxtest.Publisher
	relay *outbox.Relay
	dead  *deadHook
}

func newDelayBundle(t *testing.T, opts ...outbox.RelayOption) *delayBundle {
	t.Helper()
	b := &delayBundle{store: outboxtest.NewMemoryStore(), pub: outboxtest.NewPublisher(), dead: &deadHook{}}
	r, err := outbox.NewRelay(b.store, b.pub, append([]outbox.RelayOption{outbox.WithHooks(b.dead)}, opts...)...)
	require.NoError(t, err)
	b.relay = r
	return b
}

// write commits msgs in one transaction.
func (b *delayBundle) write(t *testing.T, msgs ...*outbox.Message) {
	t.Helper()
	tx := b.store.Begin()
	require.NoError(t, outbox.NewWriter[*outboxtest.MemoryTx](b.store).Write(t.Context(), tx, msgs...))
	require.NoError(t, tx.Commit())
}

// step runs relay steps until one claims nothing.
func (b *delayBundle) step(t *testing.T) {
	t.Helper()
	for range 20 {
		ev, err := b.relay.Step(t.Context())
		require.NoError(t, err)
		if ev.Claimed == 0 {
			return
		}
	}
	t.Fatal("the relay kept claiming")
}

// published is the ids (aggregate id and payload) of what was published, in order.
func (b *delayBundle) published() []string {
	var out []string
	for _, m := range b.pub.Messages() {
		out = append(out, m.AggregateID+string(m.Payload))
	}
	return out
}

func delayMsg(agg, n string) *outbox.Message {
	return &outbox.Message{AggregateType: "order", AggregateID: agg, EventType: "E", Payload: []byte(n)}
}

func TestRelayDelayedDelivery(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newDelayBundle(t, outbox.WithOrdering(false, 0))
		late := delayMsg("a", "1")
		late.DeliverAt = time.Now().Add(time.Minute)
		b.write(t, late, delayMsg("b", "1"))
		b.step(t)
		require.Equal(t, []string{"b1"}, b.published(), "the delayed message waits")
		time.Sleep(59 * time.Second)
		b.step(t)
		require.Equal(t, []string{"b1"}, b.published(), "a second before its time it still waits")
		time.Sleep(time.Second)
		b.step(t)
		require.Equal(t, []string{"b1", "a1"}, b.published(), "at its time it goes")
	})
}

func TestRelayExpiry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newDelayBundle(t, outbox.WithOrdering(false, 0))
		soon := delayMsg("a", "1")
		soon.ExpiresAt = time.Now().Add(time.Minute)
		later := delayMsg("b", "1")
		later.ExpiresAt = time.Now().Add(time.Hour)
		b.write(t, soon, later)
		time.Sleep(time.Minute + time.Millisecond)
		b.step(t)
		require.Equal(t, []string{"b1"}, b.published(), "the expired message is not published")
		dead := b.store.Dead()
		require.Len(t, dead, 1)
		require.Equal(t, "a", dead[0].Message.AggregateID)
		require.True(t, strings.HasPrefix(dead[0].Reason, "expired"), "reason %q", dead[0].Reason)
		require.Len(t, b.dead.errs, 1)
		require.ErrorIs(t, b.dead.errs[0], outbox.ErrExpired)
		var exp *outbox.ExpiredError
		require.True(t, errors.As(b.dead.errs[0], &exp))
		require.True(t, exp.ExpiresAt.Equal(soon.ExpiresAt))
	})
}

// TestRelayDelayAndExpiryOrdered pins what a delayed or expired message
// does to the later messages of its aggregate with ordering on
// (docs/ordering.md): a delayed head holds them back until it is sent; an
// expired one is dead, and blocks them (DeadBlocks) or lets them go
// (DeadSkips).
func TestRelayDelayAndExpiryOrdered(t *testing.T) {
	t.Parallel()
	t.Run("DelayedHeadHoldsItsAggregate", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := newDelayBundle(t)
			head := delayMsg("a", "1")
			head.DeliverAt = time.Now().Add(time.Minute)
			b.write(t, head, delayMsg("a", "2"), delayMsg("b", "1"))
			b.step(t)
			require.Equal(t, []string{"b1"}, b.published(), "a2 waits behind the delayed a1; b is not held")
			time.Sleep(time.Minute)
			b.step(t)
			require.Equal(t, []string{"b1", "a1", "a2"}, b.published())
		})
	})
	t.Run("DelayedLaterMessageHoldsOnlyWhatFollows", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := newDelayBundle(t)
			mid := delayMsg("a", "2")
			mid.DeliverAt = time.Now().Add(time.Minute)
			b.write(t, delayMsg("a", "1"), mid, delayMsg("a", "3"))
			b.step(t)
			require.Equal(t, []string{"a1"}, b.published())
			time.Sleep(time.Minute)
			b.step(t)
			require.Equal(t, []string{"a1", "a2", "a3"}, b.published())
		})
	})
	for _, tc := range []struct {
		name   string
		policy outbox.DeadPolicy
		want   []string
	}{
		{"ExpiredHeadBlocksWithDeadBlocks", outbox.DeadBlocks, []string{"b1"}},
		{"ExpiredHeadSkippedWithDeadSkips", outbox.DeadSkips, []string{"b1", "a2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := newDelayBundle(t, outbox.WithOrdering(true, tc.policy))
				head := delayMsg("a", "1")
				head.ExpiresAt = time.Now().Add(time.Minute)
				b.write(t, head, delayMsg("a", "2"), delayMsg("b", "1"))
				time.Sleep(2 * time.Minute)
				b.step(t)
				require.ElementsMatch(t, tc.want, b.published())
				dead := b.store.Dead()
				require.Len(t, dead, 1)
				require.Equal(t, "1", string(dead[0].Message.Payload))
				require.True(t, strings.HasPrefix(dead[0].Reason, "expired"), "reason %q", dead[0].Reason)
			})
		})
	}
}
