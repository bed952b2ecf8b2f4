package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"
)

// Relay slots: a preference, not a lock (docs/ordering.md, "Relay slots").
//
// An ordered relay on a store that implements Membership heartbeats into the
// store's table of relays every third of its TTL, on a goroutine of its own,
// and keeps the slot and count the last heartbeat returned in an atomic,
// which the claim loop reads without waiting. While it drains a backlog (its
// last claim came back at least half full) and more than one relay is live,
// its claims ask the store to look first at the rows of the aggregates that
// hash to its slot. What a claim keeps is still decided by the head-of-line
// rule, on the whole table, so a view that is out of date, two relays that
// both think they are slot 0, or a relay that died and still counts until
// its TTL runs out, make claims meet more often (speed), never out of order.

// slotView is a relay's slot among count live relays.
type slotView struct {
	slot, count int
}

// preference returns the slot preference of the next claim: none unless
// the relay is draining a backlog and knows of another live relay.
func (r *Relay) preference(draining bool) (slot, slots int) {
	v := r.slots.Load()
	if !draining || v == nil || v.count < 2 {
		return 0, 0
	}
	return v.slot, v.count
}

// relayID returns a new id for a relay's row in the table of relays: the
// relay's name (when it has one), the host and a random part, at most 64
// characters.
func relayID(name string) string {
	host, _ := os.Hostname()
	tail := fmt.Sprintf("-%d-%08x", os.Getpid(), rand.Uint32())
	head := host
	if name != "" {
		head = name + "@" + host
	}
	if len(head)+len(tail) > 64 {
		head = head[:64-len(tail)]
	}
	return head + tail
}

// member keeps the relay's row in the store's table of relays until ctx
// ends, then removes it. It heartbeats every third of the TTL, and a
// twentieth of it after a heartbeat that changed its view. A heartbeat that fails keeps the last slot until
// the TTL has passed since the last one that succeeded (the row is gone for
// the others by then), and then claims go on without a preference. When the
// table is missing and cannot be created, it logs one warning and stops.
func (r *Relay) member(ctx context.Context, m Membership) {
	id, ttl := relayID(r.cfg.name), r.cfg.relayTTL
	log := r.log.With(slog.String("relay_id", id))
	defer r.slots.Store(nil)
	var lastOK time.Time
	failing := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.leave(ctx, m, id, log)
			return
		case <-t.C:
		}
		next := ttl / 3
		hctx, cancel := r.storeContext(ctx)
		v, err := bounded(hctx, func(hctx context.Context) (slotView, error) {
			slot, count, err := m.Heartbeat(hctx, id, ttl)
			return slotView{slot: slot, count: count}, err
		})
		cancel()
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, ErrNoMembership):
			log.LogAttrs(ctx, slog.LevelWarn, "no table of relays: ordered claims go on without a slot preference",
				slog.String(attrError, err.Error()))
			return
		case err != nil:
			if !failing {
				log.LogAttrs(ctx, slog.LevelWarn, "relay heartbeat failed, will retry", slog.String(attrError, err.Error()))
			}
			failing = true
			if time.Since(lastOK) >= ttl {
				r.slots.Store(nil)
			}
		default:
			if failing {
				log.Info("relay heartbeat back")
			}
			failing, lastOK = false, time.Now()
			if old := r.slots.Swap(&v); old == nil || *old != v {
				// Relays come and go together (a deploy, a restart):
				// look again soon, so that the view settles in a second
				// rather than in a third of the TTL.
				next = ttl / 20
				log.LogAttrs(ctx, slog.LevelDebug, "relay slot", slog.Int("slot", v.slot), slog.Int("slots", v.count))
			}
		}
		t.Reset(jitter(next))
	}
}

// leave removes the relay's row, within StopGrace, so that the others
// cover its aggregates at their next heartbeat instead of after its TTL.
func (r *Relay) leave(ctx context.Context, m Membership, id string, log *slog.Logger) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(r.cfg.storeTimeout, StopGrace))
	defer cancel()
	if _, err := bounded(lctx, func(lctx context.Context) (struct{}, error) {
		return struct{}{}, m.Leave(lctx, id)
	}); err != nil {
		log.LogAttrs(ctx, slog.LevelDebug, "leave the table of relays failed", slog.String(attrError, err.Error()))
	}
}
