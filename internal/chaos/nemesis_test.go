package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"syscall"
	"time"

	"github.com/outboxkit/outbox"
)

// A nemesis injects one kind of fault while the producers run, until ctx
// ends, and heals everything it broke before it returns. It records each
// fault with the messages that were in flight when it struck.
type nemesis func(ctx context.Context, r *run)

var nemeses = map[string]nemesis{
	"kill9":          killRelays,
	"sigstop":        pauseRelays,
	"broker-cut":     cutBroker,
	"broker-restart": restartBroker,
	"db-restart":     restartDB,
	"db-freeze":      freezeDB,
	"pool":           exhaustConnections,
	"longtx":         longTransactions,
}

// killRelays kills a random relay with SIGKILL every 1-2.5 s and starts it
// again 0.2-0.8 s later. The killed relay's leased rows stay leased; another
// relay takes them over when the lease expires. Its held claims (--held-claims)
// roll back when PostgreSQL sees the connection close, and are claimable at
// once. With CDC relays, every other kill is of the relay that
// streams the slot, so that a standby takes over (see pickRelay).
func killRelays(ctx context.Context, r *run) {
	for r.sleep(ctx, r.between(time.Second, 2500*time.Millisecond)) {
		slot, target := r.pickRelay("cdc_streamer_kills")
		at := time.Now()
		// Stopped first, the relay can neither claim nor settle while the rows
		// it holds locked are sampled; they are gone once it is dead.
		r.relays.signal(slot, syscall.SIGSTOP)
		inFlight := r.inFlight()
		if inFlight == nil {
			inFlight = map[string]int{}
		}
		r.relays.kill(slot)
		for id, n := range r.inFlight() { // a dead relay acks nothing: its leased rows are all still here
			inFlight[id] = max(inFlight[id], n)
		}
		r.sleep(context.Background(), r.between(200*time.Millisecond, 800*time.Millisecond))
		if err := r.relays.start(slot); err != nil {
			r.check("restart relay-%d: %v", slot+1, err)
		}
		r.fault(Fault{Kind: "kill9", Target: fmt.Sprintf("relay-%d%s", slot+1, target), At: at, InFlight: keys(inFlight)})
	}
}

// pickRelay returns the slot of a random relay, and with CDC relays, every
// other time (the first included), of the one that streams (counted in
// r.extra under key), with " (streaming)" to add to the fault's target.
func (r *run) pickRelay(key string) (int, string) {
	slot := r.rng.IntN(r.relays.count())
	r.picks++
	if !r.relayCfg.cdc || r.picks%2 == 0 {
		return slot, ""
	}
	s := r.streamingRelay()
	if s < 0 {
		return slot, ""
	}
	r.mu.Lock()
	r.extra[key]++
	r.mu.Unlock()
	return s, " (streaming)"
}

// pauseRelays stops a random relay with SIGSTOP for longer than the lease,
// so that another relay takes its rows over, then lets it run again: the
// zombie wakes up in the middle of a batch it no longer owns. With CDC
// relays, every other pause is of the relay that streams, whose
// connection the server ends after wal_sender_timeout, so that a standby
// takes over.
func pauseRelays(ctx context.Context, r *run) {
	for r.sleep(ctx, r.between(500*time.Millisecond, 1500*time.Millisecond)) {
		slot, target := r.pickRelay("cdc_streamer_pauses")
		at := time.Now()
		r.relays.signal(slot, syscall.SIGSTOP)
		inFlight := r.inFlight()
		// A claim the relay sent just before it stopped may commit after
		// that sample; its rows stay pending until their lease expires, a
		// second later at the earliest.
		r.sleep(context.Background(), time.Second)
		for id, n := range r.inFlight() {
			if _, ok := inFlight[id]; !ok {
				inFlight[id] = n
			}
		}
		r.sleep(context.Background(), relayLease+time.Second)
		r.relays.signal(slot, syscall.SIGCONT)
		r.mu.Lock()
		r.stopped = append(r.stopped, inFlight)
		r.mu.Unlock()
		r.fault(Fault{Kind: "sigstop", Target: fmt.Sprintf("relay-%d%s", slot+1, target), At: at, InFlight: keys(inFlight)})
	}
}

// cutBroker breaks the relays' connections to the broker through the
// fault proxy, alternating a cut (every connection reset, new ones refused)
// of 1.5-2.5 s and a blackhole (connections kept, nothing forwarded, so
// publishes time out and acknowledgements are lost) of 2.5-3 s.
func cutBroker(ctx context.Context, r *run) {
	for i := 0; r.sleep(ctx, r.between(time.Second, 2*time.Second)); i++ {
		kind, hold := "broker-cut", r.between(1500*time.Millisecond, 2500*time.Millisecond)
		before := r.inFlight()
		at := time.Now()
		if i%2 == 0 {
			r.proxy.Cut()
		} else {
			kind, hold = "broker-blackhole", r.between(relayPublishTimeout+500*time.Millisecond, relayPublishTimeout+time.Second)
			r.proxy.Blackhole()
		}
		r.sleep(context.Background(), hold)
		during := r.inFlight() // nothing can be confirmed through a broken link: every uncertain row is here
		r.proxy.Latency(brokerLatency)
		r.fault(Fault{Kind: kind, Target: "relays->broker", At: at, InFlight: keys(before, during)})
	}
}

// restartBroker kills the private broker with SIGKILL and starts it again on
// the same data 0.5-1.5 s later.
func restartBroker(ctx context.Context, r *run) {
	for r.sleep(ctx, r.between(1500*time.Millisecond, 3*time.Second)) {
		before := r.inFlight()
		at := time.Now()
		r.broker.crash()
		r.sleep(context.Background(), r.between(500*time.Millisecond, 1500*time.Millisecond))
		during := r.inFlight() // nothing can be confirmed while the broker is down
		if err := r.broker.start(); err != nil {
			r.check("restart %s: %v", r.broker.name, err)
		}
		r.fault(Fault{Kind: "broker-restart", Target: r.broker.name, At: at, InFlight: keys(before, during)})
	}
}

// restartDB kills the private database server with SIGKILL (PostgreSQL:
// the postmaster and every backend) and starts it again on the same data
// 0.5-1.5 s later; it recovers from its log.
//
// Held claims (postgres-held) leave no trace in the table once the server
// is gone: a row claimed between the sample and the kill went out, and
// its claim died with the server, so its copy after the restart looked
// like a duplicate with no cause (11 of 56 in one full run). There the
// relays are stopped (SIGSTOP) from the sample until the server is dead,
// so that what they hold is what was sampled.
func restartDB(ctx context.Context, r *run) {
	for r.sleep(ctx, r.between(1500*time.Millisecond, 3*time.Second)) {
		if r.relayCfg.held {
			r.relays.signalAll(syscall.SIGSTOP)
		}
		before := r.inFlight()
		at := time.Now()
		r.db.srv.crash()
		if r.relayCfg.held {
			r.relays.signalAll(syscall.SIGCONT)
		}
		r.sleep(context.Background(), r.between(500*time.Millisecond, 1500*time.Millisecond))
		if err := r.db.srv.start(); err != nil {
			r.check("restart %s: %v", r.db.kind, err)
		}
		after := r.inFlight() // at once, before the relays' backoff lets them ack
		r.fault(Fault{Kind: "db-restart", Target: r.db.kind, At: at, InFlight: keys(before, after)})
	}
}

// freezeStoreTimeout is the relays' store timeout in the db-freeze scenario,
// shorter than the default so that a freeze of a few seconds outlasts it.
const freezeStoreTimeout = time.Second

// frozenStopBound is how long a relay may take to exit after SIGTERM while
// its database is frozen: the publish timeout, outbox.StopGrace for the
// batch's ack, the second the daemon gives its connections to close, and a
// second of slack for the process.
const frozenStopBound = relayPublishTimeout + outbox.StopGrace + 2*time.Second

// freezeDB black-holes the relays' database connections through the fault
// proxy (sockets open, nothing forwarded: a partition, or a server that
// hangs) for 2-3 s, longer than their store timeout, then heals. Claims and
// acks in the air time out; rows published but not acknowledged go out again
// after their lease. During the first freeze it also stops a relay with
// SIGTERM, which must exit cleanly within frozenStopBound, and starts it
// again after the heal.
func freezeDB(ctx context.Context, r *run) {
	for i := 0; r.sleep(ctx, r.between(time.Second, 2*time.Second)); i++ {
		before := r.inFlight()
		at := time.Now()
		hold := r.between(freezeStoreTimeout+time.Second, freezeStoreTimeout+2*time.Second)
		r.dbProxy.Blackhole()
		stopped := -1
		if i == 0 {
			r.sleep(context.Background(), freezeStoreTimeout+300*time.Millisecond) // a claim has timed out
			stopped = r.rng.IntN(r.relays.count())
			r.stopFrozen(stopped)
		}
		r.sleep(context.Background(), time.Until(at.Add(hold)))
		during := r.inFlight() // the monitor reaches the database directly
		r.dbProxy.Restore()
		if stopped >= 0 {
			if err := r.relays.start(stopped); err != nil {
				r.check("restart relay-%d after the freeze: %v", stopped+1, err)
			}
		}
		r.fault(Fault{Kind: "db-freeze", Target: "relays->" + r.db.kind, At: at, InFlight: keys(before, during)})
	}
}

// stopFrozen stops the relay of slot with SIGTERM while its database is
// frozen, and checks that it exits cleanly within frozenStopBound.
func (r *run) stopFrozen(slot int) {
	start := time.Now()
	err := r.relays.proc(slot).stop(frozenStopBound + 10*time.Second)
	took := time.Since(start)
	r.mu.Lock()
	r.extra["stop_while_frozen_ms"] = max(r.extra["stop_while_frozen_ms"], took.Milliseconds())
	r.mu.Unlock()
	switch {
	case err != nil:
		r.check("stop relay-%d while the database was frozen: %v", slot+1, err)
	case took > frozenStopBound:
		r.check("relay-%d took %v to stop while the database was frozen, want at most %v", slot+1,
			took.Round(time.Millisecond), frozenStopBound)
	}
}

// exhaustConnections fills the database server's connection slots with a
// hog, ends every connection the relays hold, keeps taking every slot that
// frees up for four seconds, then lets go. The relays, each with its own
// small pool shared by three relay loops, must ride it out; the business
// pool, opened before, keeps serving the producers.
func exhaustConnections(ctx context.Context, r *run) {
	hold := 4 * time.Second
	var peak int64
	sample := func() {
		qctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if n, err := r.db.relayConns(qctx, r.monitor); err == nil {
			peak = max(peak, int64(n))
		}
	}
	// watch samples the relays' connections every 100 ms for d, or until
	// ctx ends; it reports whether the full d passed.
	watch := func(d time.Duration) bool {
		for end := time.Now().Add(d); time.Now().Before(end); {
			sample()
			if !r.sleep(ctx, 100*time.Millisecond) {
				return false
			}
		}
		return true
	}
	for watch(r.between(time.Second, 2*time.Second)) {
		hog := r.db.open(1000)
		var conns []*sql.Conn
		grab := func() {
			for {
				cctx, cancel := context.WithTimeout(context.Background(), time.Second)
				c, err := hog.Conn(cctx)
				if err == nil {
					err = c.PingContext(cctx)
					if err != nil {
						c.Close()
					}
				}
				cancel()
				if err != nil {
					return
				}
				conns = append(conns, c)
			}
		}
		at := time.Now()
		grab()
		if len(conns) == 0 {
			r.check("pool: the hog could not open a single connection")
			hog.Close()
			return
		}
		kctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		killed, locked, err := r.db.killRelayConns(kctx, conns[0])
		cancel()
		if err != nil {
			r.check("pool: end the relays' connections: %v", err)
		}
		inFlight := r.inFlight()
		if inFlight == nil {
			inFlight = map[string]int{}
		}
		for _, id := range locked {
			inFlight[id] = max(inFlight[id], 1)
		}
		for end := time.Now().Add(hold); time.Now().Before(end); {
			grab()
			sample()
			pause(50 * time.Millisecond)
		}
		during := r.inFlight()
		taken := len(conns)
		for _, c := range conns {
			c.Close()
		}
		hog.Close()
		healed := time.Now()
		r.mu.Lock()
		r.windows = append(r.windows, [2]time.Time{at, healed})
		r.extra["hog_conns"] = max(r.extra["hog_conns"], int64(taken))
		r.extra["relay_conns_killed"] += int64(killed)
		r.mu.Unlock()
		r.fault(Fault{Kind: "pool", Target: r.db.kind, At: at, InFlight: keys(inFlight, during)})
		if !watch(hold) { // let the relays recover before the next storm
			break
		}
	}
	sample()
	r.mu.Lock()
	r.extra["relay_conns_peak"] = peak
	r.mu.Unlock()
	if limit := int64(r.relays.count() * r.relayCfg.maxConns); peak > limit {
		r.check("pool: the relays held %d connections, more than their pools allow (%d)", peak, limit)
	}
}

// longTransactions starts, every 0.5-1.5 s, a transaction that writes a
// message (taking an outbox id) and stays open for 3-5 s while the
// producers commit later ids, then commits (two in three) or rolls back.
// Commit order is not id order: a relay must neither skip the early id nor
// stall behind it. The long transactions take turns on aggregates of their
// own, so the producers never queue behind their locks.
func longTransactions(ctx context.Context, r *run) {
	const minHold, maxHold = 3 * time.Second, 5 * time.Second
	end, _ := ctx.Deadline()
	for i := 0; r.sleep(ctx, r.between(500*time.Millisecond, 1500*time.Millisecond)); i++ {
		if time.Until(end) < maxHold+time.Second {
			return // the producers stop with the load: nothing would be written past a hog started now
		}
		r.work.hog(fmt.Sprintf("hog%d", i), hogAggName(i%hogAggs), r.between(minHold, maxHold), i%3 == 2)
	}
}

// longTxConns is the room the business pool keeps for long transactions:
// one every 0.5 s at the most, each open 5 s at the most, and more for those
// that wait for an earlier one on their aggregate (hogAggs take turns).
const longTxConns = 16

// fault records a fault that has been healed now.
func (r *run) fault(f Fault) {
	f.Healed = time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, f)
}

// inFlight samples the rows in flight (see database.inFlight), trying a
// few times since the monitor's connections may have just been broken.
func (r *run) inFlight() map[string]int {
	var err error
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var m map[string]int
		m, err = r.db.inFlight(ctx, r.monitor)
		cancel()
		if err == nil {
			return m
		}
		pause(100 * time.Millisecond)
	}
	r.check("could not sample the rows in flight: %v", err)
	return nil
}

// sleep waits d or until ctx ends; it reports whether the full d passed.
func (r *run) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// between returns a random duration in [lo, hi).
func (r *run) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)))
}

// keys returns the union of the maps' keys.
func keys(ms ...map[string]int) []string {
	set := map[string]int{}
	for _, m := range ms {
		for k := range m {
			set[k] = 0
		}
	}
	return sortedKeys(set)
}
