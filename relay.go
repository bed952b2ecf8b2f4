package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// ErrRunning is returned by [Relay.Run] when the relay is already running.
var ErrRunning = errors.New("outbox: relay already running")

// ErrStoreTimeout is wrapped by the error of a store call that ran out of
// the relay's store timeout ([WithStoreTimeout]).
var ErrStoreTimeout = errors.New("outbox: database call timed out")

// Relay moves committed messages from a [Store] to a [Publisher]: it claims a
// batch, publishes it, acknowledges what the broker confirmed, reschedules
// failures with exponential backoff and jitter, and marks dead what has used
// its attempts or was refused for good. When messages fail because their
// destination is unreachable and the publisher confirms it is down (its Ping
// fails, or, without a Ping, the whole batch failed that way), the relay gives
// those attempts back; when nothing got through it also pauses, probing with
// growing intervals, so that an outage never spends messages' attempts.
//
// Any number of relays, in one process or many, may share a table. A Relay is
// safe for concurrent use; Run may be called once at a time.
type Relay struct {
	cfg     relayConfig
	store   Store
	pub     Publisher
	log     *slog.Logger
	wake    chan struct{}
	running atomic.Bool
	// slots is this relay's slot among the live relays of its table
	// (members.go), nil while it has none.
	slots atomic.Pointer[slotView]

	hBatch []HookBatch
	hClaim []HookClaim
	hMsg   []HookMessage
	hDest  []HookDestination
	// hookMu makes the hooks see one call at a time, also while several
	// batches settle at once.
	hookMu sync.Mutex
}

// NewRelay returns a relay from store to pub. It returns an error naming every
// invalid option. It panics if store or pub is nil, a programmer error.
func NewRelay(store Store, pub Publisher, opts ...RelayOption) (*Relay, error) {
	if store == nil || pub == nil {
		panic("outbox: NewRelay with a nil Store or Publisher")
	}
	cfg := defaultRelayConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("outbox: new relay: %w", err)
	}
	r := &Relay{cfg: cfg, store: store, pub: pub, wake: make(chan struct{}, 1)}
	r.log = cfg.logger.With("component", "relay")
	if cfg.name != "" {
		r.log = r.log.With(attrRelay, cfg.name)
	}
	for _, h := range cfg.hooks {
		if h, ok := h.(HookBatch); ok {
			r.hBatch = append(r.hBatch, h)
		}
		if h, ok := h.(HookClaim); ok {
			r.hClaim = append(r.hClaim, h)
		}
		if h, ok := h.(HookMessage); ok {
			r.hMsg = append(r.hMsg, h)
		}
		if h, ok := h.(HookDestination); ok {
			r.hDest = append(r.hDest, h)
		}
	}
	return r, nil
}

// Notify tells the relay that new rows may be due, so an idle relay looks at
// once instead of waiting for its poll interval. It never blocks; calls made
// while the relay is busy coalesce into one wake-up.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run relays messages until ctx is cancelled, then finishes the batches in
// flight (publishing them within the publish timeout and acknowledging them),
// claims nothing new, and returns nil, at most the publish timeout plus
// [StopGrace] after ctx was cancelled whatever the database and the broker
// do: a batch whose acknowledgement cannot finish by then is left to its
// lease, and published again after it (at-least-once). Store errors,
// timeouts included ([WithStoreTimeout]), are logged and retried; Run does
// not return because of them. If the store implements [Notifier],
// Run listens for wake-ups and falls back to polling while the listener is
// down.
//
// Run claims a new batch at once while claims come back full, after the
// minimum poll interval when the last claim found some rows (with ordering,
// as soon as one of its batches is acknowledged, if that comes first: that is
// what makes the aggregates' next messages claimable), and otherwise after a
// quarter of the time since a claim last found rows, up to the poll interval
// (adaptive polling); [Relay.Notify] and the store's notifications cut the wait short,
// and notifications that arrive before a claim are all answered by that one
// claim. With [WithMaxInFlight] above 1 it claims the next batch
// while earlier ones are at the broker.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer r.running.Store(false)

	var wg sync.WaitGroup
	lctx, stopListen := context.WithCancel(ctx)
	defer func() { stopListen(); wg.Wait() }()
	if n, ok := r.store.(Notifier); ok {
		wg.Go(func() { r.listen(lctx, n) })
	}
	if m, ok := r.store.(Membership); ok && r.cfg.ordered && r.cfg.relayTTL > 0 {
		wg.Go(func() { r.member(lctx, m) })
	}

	r.log.LogAttrs(ctx, slog.LevelInfo, "relay started",
		slog.Int("min_batch_size", r.cfg.minBatch), slog.Int("max_batch_size", r.cfg.maxBatch),
		slog.Int("min_in_flight", r.cfg.minInFlight), slog.Int("max_in_flight", r.cfg.maxInFlight),
		slog.Int("max_unacknowledged", r.cfg.duplicatesBound()), slog.Duration("poll_interval", r.cfg.pollInterval))
	defer r.log.Info("relay stopped")

	bctx, release := r.batchContext(ctx)
	defer release()
	p := r.newPipeline()
	defer p.close()
	p.loop(ctx, bctx)
	return nil
}

// batchContext returns the context in which claimed batches are published
// and settled: the rows are the relay's, so a stop (ctx cancelled) does not
// cut them short, but the stop's deadline does, the publish timeout plus
// StopGrace after it. release frees it once the batches are done.
func (r *Relay) batchContext(ctx context.Context) (bctx context.Context, release func()) {
	bctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	grace := r.cfg.publishTimeout + StopGrace
	var mu sync.Mutex
	var timer *time.Timer
	stopWatch := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(grace, func() {
			cancel(fmt.Errorf("outbox: relay stopping: the batch in flight had %v to finish", grace))
		})
	})
	return bctx, func() {
		stopWatch()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel(nil)
	}
}

// storeContext bounds one store call by the store timeout.
func (r *Relay) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, r.cfg.storeTimeout, ErrStoreTimeout)
}

// storeErr returns err, marked with ErrStoreTimeout when the store call's own
// deadline (storeContext's sctx) is what cut it short, or with the end of a
// stop's grace (see batchContext), since drivers say only "context canceled".
func (r *Relay) storeErr(sctx context.Context, err error) error {
	cause := context.Cause(sctx)
	switch {
	case err == nil || cause == nil || errors.Is(err, cause) || cause == context.Canceled:
		return err
	case errors.Is(cause, ErrStoreTimeout):
		return fmt.Errorf("%w after %v: %w", ErrStoreTimeout, r.cfg.storeTimeout, err)
	default:
		return fmt.Errorf("%w: %w", cause, err)
	}
}

// storeAbandon is how long after a store call's context ended the relay
// still waits for the call to return before it goes on without it.
const storeAbandon = time.Second

// errAbandoned is returned by bounded for a call that outlived its context.
var errAbandoned = errors.New("outbox: the database call ignored its deadline; the relay went on without it")

// bounded runs a store call and returns its result, or errAbandoned (with
// the context's cause) once ctx has been done for storeAbandon: a driver
// call that ignores its context must not hold the relay, nor a stop. Go's
// database/sql commits without a context, and go-sql-driver/mysql then waits
// for its socket's read timeout (a minute by default in the daemon) when
// the database stops answering mid-commit. The abandoned call goes on in
// the background and ends with its connection; what it claimed waits out
// its lease, what it settled is settled, as after any lost answer.
func bounded[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call(ctx)
		done <- result{v, err}
	}()
	select {
	case res := <-done:
		return res.v, res.err
	case <-ctx.Done():
	}
	t := time.NewTimer(storeAbandon)
	defer t.Stop()
	select {
	case res := <-done:
		return res.v, res.err
	case <-t.C:
		var zero T
		return zero, fmt.Errorf("%w: %w", errAbandoned, context.Cause(ctx))
	}
}

// pipeline is one Run: the claim loop, on Run's goroutine, and a goroutine
// per batch in flight that publishes the batch and settles it.
type pipeline struct {
	r        *Relay
	outcomes chan outcome // settled batches, in the order they settled
	inFlight int          // batches claimed and not yet settled
	wg       sync.WaitGroup

	down      bool          // the destination is down: probe one message at a time
	pauseNext bool          // while down: pause before the next probe
	probe     time.Duration // the next pause while down
	storeWait time.Duration // the next pause after a store error
	size      *sizing       // the next claim's size, the batches allowed in flight, the waits
	draining  bool          // draining a backlog (drainingAfter): prefer the relay's slot
	dry       int           // claims in a row that found nothing
	chain     chain         // with ordering: the runs of the batches in flight (waves.go)
	quiet     bool          // idle since the last claim that found rows, and said so (sayIdle)
}

// outcome is what settling a batch found.
type outcome struct {
	b           *batch
	ev          BatchEvent
	unavailable error // the whole batch met a destination that is down
	err         error // a store error that cut the cycle short
}

func (r *Relay) newPipeline() *pipeline {
	return &pipeline{
		r:         r,
		outcomes:  make(chan outcome, r.cfg.maxInFlight),
		probe:     r.cfg.probeInterval,
		storeWait: r.cfg.pollInterval,
		size:      newSizing(&r.cfg),
	}
}

// close waits for every batch still in flight to be published and settled,
// and logs the store errors of those last batches.
func (p *pipeline) close() {
	p.wg.Wait()
	close(p.outcomes)
	for o := range p.outcomes {
		if o.err != nil {
			p.r.log.LogAttrs(context.Background(), slog.LevelError, "relay cycle failed while stopping",
				slog.String(attrError, o.err.Error()))
		}
	}
}

// loop claims and dispatches batches until ctx is done; bctx is the batches'
// context (see batchContext).
func (p *pipeline) loop(ctx, bctx context.Context) {
	r := p.r
	for ctx.Err() == nil {
		if p.down {
			p.probeDestination(ctx, bctx)
			continue
		}
		// Wait for a free slot, taking in the batches that settled meanwhile.
		waited := p.inFlight >= p.size.inFlight
		if !p.collect(ctx, waited) {
			return
		}
		if p.inFlight >= p.size.inFlight || p.down {
			continue
		}
		// Every notification so far is answered by this claim.
		select {
		case <-r.wake:
		default:
		}
		seen := claimSeen{start: time.Now(), limit: p.size.batch, waited: waited}
		// The claim runs in bctx: a stop does not cut it short, where the
		// rows it leased would wait out their lease (with ordering, and
		// their aggregates' later rows with them); a batch claimed while
		// the relay began to stop is given back at once.
		slot, slots := r.preference(p.draining)
		b, err := r.claim(ctx, bctx, claimArgs{limit: seen.limit, chain: p.chain.ids(), slot: slot, slots: slots})
		seen.took = time.Since(seen.start)
		p.drainingAfter(b, seen.limit)
		if ctx.Err() != nil {
			if b != nil {
				r.giveBack(ctx, bctx, b)
			}
			return
		}
		if err != nil {
			p.size.reset()
			p.draining = false
			p.storeFailed(ctx, err)
			continue
		}
		if b == nil { // nothing due
			wait := p.size.claimed(seen)
			p.sayIdle(ctx, wait)
			p.idle(ctx, wait)
			continue
		}
		p.quiet = false
		p.dispatch(ctx, bctx, b)
		seen.n = b.ev.Claimed
		if wait := p.size.claimed(seen); wait > 0 {
			p.afterPartial(ctx, wait)
		}
	}
}

// drainingAfter updates whether the relay is draining a backlog, after a
// claim of limit that returned b (nil: nothing): it starts with a claim at
// least half full and ends with two empty claims in a row or a store error.
// A short claim changes nothing: while the relay prefers its slot, claims
// often come back short behind rows other relays hold, and a claim without
// the preference would take any aggregates and spread them among the
// relays; in a trickle the preference never starts.
func (p *pipeline) drainingAfter(b *batch, limit int) {
	switch {
	case b == nil:
		if p.dry++; p.dry >= 2 {
			p.draining = false
		}
	case 2*b.ev.Claimed >= limit:
		p.draining, p.dry = true, 0
	default:
		p.dry = 0
	}
}

// sayIdle logs at debug level, once until a claim finds rows again, that an
// empty claim left the relay waiting the whole poll interval (wait): from
// then on it claims once per poll interval, or when woken. It is how a
// reader of the log tells an idle relay, and when it became one, from a
// stuck one.
func (p *pipeline) sayIdle(ctx context.Context, wait time.Duration) {
	if p.quiet || wait < p.r.cfg.pollInterval {
		return
	}
	p.quiet = true
	p.r.log.LogAttrs(ctx, slog.LevelDebug, "no rows due, relay idle", slog.Duration("poll_interval", wait))
}

// afterPartial waits for wait (the minimum poll interval) after a claim that
// came back short of the batch size. Without ordering, a short claim means
// the due backlog is empty, so the relay looks again after that wait. With
// ordering, it usually means the rest of the backlog waits behind messages in flight (an
// aggregate's next message is claimable only once the previous one is
// acknowledged), so the settling of one of this relay's batches is exactly
// what frees more: the relay claims again as soon as a batch settles, and
// after the minimum poll interval at the latest (the heads another relay
// holds are freed without telling this one). This is not a busy loop: every
// early claim follows an acknowledgement, and a claim that finds nothing
// backs off as usual.
func (p *pipeline) afterPartial(ctx context.Context, wait time.Duration) {
	if p.r.cfg.ordered {
		p.idle(ctx, wait)
		return
	}
	p.r.sleep(ctx, wait)
}

// idle waits for d, a notification or ctx. While batches are in flight it
// also stops waiting when one of them settles: with ordering, that is what
// frees the next message of its aggregates.
func (p *pipeline) idle(ctx context.Context, d time.Duration) {
	if p.inFlight == 0 {
		p.r.sleep(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-p.r.wake:
	case o := <-p.outcomes:
		p.inFlight--
		p.apply(ctx, o)
	}
}

// dispatch publishes and settles b on a goroutine of its own, in bctx (see
// batchContext; ctx is Run's). Batches settle as soon as the broker has
// answered for them, so one that waits for its publish timeout does not hold
// up the acknowledgement of later ones.
func (p *pipeline) dispatch(ctx, bctx context.Context, b *batch) {
	p.inFlight++
	if p.r.cfg.ordered {
		p.chain.add(b)
	}
	p.wg.Go(func() {
		if len(b.send) > 0 {
			p.r.publish(ctx, bctx, b)
		}
		ev, unavailable, err := p.r.settle(ctx, bctx, b)
		p.outcomes <- outcome{b: b, ev: ev, unavailable: unavailable, err: err} // never blocks: room for maxInFlight
	})
}

// collect takes in the outcomes of settled batches; when block is set it
// waits for at least one (or for ctx). It returns false when ctx ended.
func (p *pipeline) collect(ctx context.Context, block bool) bool {
	for {
		var o outcome
		if block {
			select {
			case o = <-p.outcomes:
			case <-ctx.Done():
				return false
			}
		} else {
			select {
			case o = <-p.outcomes:
			default:
				return true
			}
		}
		block = false
		p.inFlight--
		p.apply(ctx, o)
	}
}

// apply updates the loop's state with a settled batch's outcome.
func (p *pipeline) apply(ctx context.Context, o outcome) {
	p.chain.remove(o.b)
	switch {
	case o.err != nil:
		p.storeFailed(ctx, o.err)
	case o.unavailable != nil:
		p.pause(ctx, o.unavailable)
	default:
		p.storeWait = p.r.cfg.pollInterval
		p.size.settled(o.ev.Duration)
	}
}

// storeFailed logs a store error and waits, longer each time in a row. A
// store call that timed out is a warning: the database stopped answering
// for a while, and the relay tries again.
func (p *pipeline) storeFailed(ctx context.Context, err error) {
	r := p.r
	level, msg := slog.LevelError, "relay cycle failed"
	if errors.Is(err, ErrStoreTimeout) {
		level, msg = slog.LevelWarn, "database call timed out, will retry"
	}
	r.log.LogAttrs(ctx, level, msg, slog.String(attrError, err.Error()),
		slog.Duration(attrDelay, p.storeWait))
	r.sleep(ctx, jitter(p.storeWait))
	p.storeWait = min(2*p.storeWait, max(r.cfg.pollInterval, 30*time.Second))
}

// pause enters the down state: the batches still in flight are
// settled first (they meet the same outage and get their attempts back), then
// the relay pauses before its first probe.
func (p *pipeline) pause(ctx context.Context, err error) {
	r := p.r
	p.pauseNext = true
	if !p.down {
		p.down = true
		r.log.LogAttrs(ctx, slog.LevelWarn, "destination unavailable, pausing",
			slog.String(attrError, err.Error()), slog.Duration(attrDelay, p.probe))
		r.destination(false, err)
	}
}

// probeDestination is one step of the down state: wait until nothing is in
// flight, pause (after a failure), then ask the broker where it can answer,
// and try one message.
func (p *pipeline) probeDestination(ctx, bctx context.Context) {
	r := p.r
	for p.inFlight > 0 {
		if !p.collect(ctx, true) {
			return
		}
	}
	if p.pauseNext {
		r.pause(ctx, jitter(p.probe))
		p.probe = min(2*p.probe, r.cfg.maxProbeInterval)
		p.pauseNext = false
		if ctx.Err() != nil {
			return
		}
	}
	if pg, ok := r.pub.(Pinger); ok {
		if err := r.ping(ctx, pg); err != nil {
			p.pauseNext = true
			return
		}
	}
	// Half-open: one message, synchronously.
	ev, unavailable, err := r.step(ctx, bctx, 1)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			p.storeFailed(ctx, err)
		}
	case unavailable != nil:
		p.pauseNext = true
	case ev.Claimed > 0:
		p.down, p.probe, p.storeWait = false, r.cfg.probeInterval, r.cfg.pollInterval
		p.size.reset()
		r.log.Info("destination available again")
		r.destination(true, nil)
	default: // nothing to send: wait like an idle relay, still down
		r.sleep(ctx, r.cfg.pollInterval)
	}
}

// Step runs one claim-publish-acknowledge cycle of up to the largest batch
// size ([WithBatchSize], [WithBatchSizeRange]) and reports what it did. It
// is what Run repeats; tests and tools use it to drive a relay by hand. A cancelled ctx stops the claim but not the
// publishing and acknowledging of rows already claimed, which must finish
// within the publish timeout plus [StopGrace] after it.
func (r *Relay) Step(ctx context.Context) (BatchEvent, error) {
	bctx, release := r.batchContext(ctx)
	defer release()
	ev, unavailable, err := r.step(ctx, bctx, r.cfg.maxBatch)
	if err == nil && unavailable != nil {
		err = unavailable
	}
	return ev, err
}

// step claims up to limit rows and sees them through, synchronously. It
// returns the batch's event, the destination error when the whole batch found
// the destination unavailable, and a store error that cut the cycle short.
// The claim runs in ctx, the publish and settle in bctx (see batchContext).
func (r *Relay) step(ctx, bctx context.Context, limit int) (ev BatchEvent, unavailable error, err error) {
	b, err := r.claim(ctx, ctx, claimArgs{limit: limit})
	if err != nil {
		return BatchEvent{Err: err}, nil, err
	}
	if b == nil {
		return ev, nil, nil
	}
	if len(b.send) > 0 {
		r.publish(ctx, bctx, b)
	}
	return r.settle(ctx, bctx, b)
}

// batch is a claimed batch on its way through the relay.
type batch struct {
	ev      BatchEvent // Claimed so far
	start   time.Time  // when the claim began
	claimed time.Time  // when it returned
	send    []*Message
	dead    []failure // killed at claim time: malformed, too large, attempts used
	errs    []error   // the publisher's results for send
	held    HeldClaim // the store's open transaction holding the rows, or nil
	// With ordering (waves.go): each aggregate's run in this batch, and the
	// runs of earlier batches in flight that it must wait for.
	runs  map[aggregateKey]*runDone
	after map[aggregateKey][]*runDone
}

// claimArgs are what a claim asks for beyond the relay's settings.
type claimArgs struct {
	limit       int
	chain       []int64 // ClaimParams.Chain
	slot, slots int     // ClaimParams.Slot and Slots
}

// claim claims up to a.limit rows, with the store call in context in, and
// sorts them into those to send and those to kill. It returns a nil batch
// when nothing was due, and reports a failed claim to the batch hooks,
// unless ctx (Run's) ended: a claim cut short by a stop is no failure.
func (r *Relay) claim(ctx, in context.Context, a claimArgs) (*batch, error) {
	start := time.Now()
	cctx, cancel := r.storeContext(in)
	defer cancel()
	claim, err := bounded(cctx, func(cctx context.Context) (*Claim, error) {
		return r.store.Claim(cctx, ClaimParams{
			Limit:       a.limit,
			Lease:       r.cfg.lease,
			Ordered:     r.cfg.ordered,
			BlockOnDead: r.cfg.ordered && r.cfg.deadPolicy == DeadBlocks,
			Chain:       a.chain,
			Slot:        a.slot,
			Slots:       a.slots,
			Delete:      r.cfg.deleteSent,
			MaxPayload:  r.cfg.maxPayload,
		})
	})
	if ctx.Err() == nil {
		r.claimDone(err)
	}
	if err != nil {
		err = fmt.Errorf("claim batch: %w", r.storeErr(cctx, err))
		if ctx.Err() == nil { // a claim cut short by a stop is no failure of the store
			r.batchDone(BatchEvent{Err: err}, start)
		}
		return nil, err
	}
	claimed := len(claim.Messages) + len(claim.Malformed)
	if claimed == 0 {
		return nil, nil
	}
	b := &batch{
		ev:      BatchEvent{Claimed: claimed},
		start:   start,
		claimed: time.Now(),
		send:    make([]*Message, 0, len(claim.Messages)),
		held:    claim.Held,
	}
	for _, bad := range claim.Malformed {
		b.kill(bad.Message, fmt.Errorf("malformed row: %w", bad.Err))
	}
	for _, m := range claim.Messages {
		switch {
		case m.Expired(b.claimed):
			b.kill(m, &ExpiredError{ExpiresAt: m.ExpiresAt, ClaimedAt: b.claimed})
		case m.Attempt > r.cfg.maxAttempts:
			b.kill(m, fmt.Errorf("attempts exhausted: attempt %d of %d was claimed, the earlier ones never finished (relay stopped or lease expired mid-publish)",
				m.Attempt, r.cfg.maxAttempts))
		case r.cfg.maxPayload > 0 && len(m.Payload) > r.cfg.maxPayload:
			b.kill(m, Permanent(fmt.Errorf("payload is %d bytes, over the relay's limit of %d", len(m.Payload), r.cfg.maxPayload)))
		case !claim.ValidJSON && m.JSONPayload() && !json.Valid(m.Payload):
			b.kill(m, Permanent(fmt.Errorf("payload is not valid JSON, which content type %s requires", m.MediaType())))
		default:
			b.send = append(b.send, m)
		}
	}
	return b, nil
}

// giveBack settles b without publishing it: its rows are due again at
// once, their attempts not counted (the rows to kill are killed).
func (r *Relay) giveBack(ctx, bctx context.Context, b *batch) {
	b.errs = make([]error, len(b.send))
	for i := range b.errs {
		b.errs[i] = errHeldBack
	}
	_, _, _ = r.settle(ctx, bctx, b) // settle logged and reported it
}

func (b *batch) kill(m *Message, reason error) {
	b.dead = append(b.dead, failure{msg: m, err: reason})
}

// publish sends b's messages within the publish timeout and sets b.errs:
// in one call, or, when an ordered batch holds several messages of an
// aggregate, in waves (waves.go). bctx is the batch's context (see
// batchContext), which a stop does not cancel; ctx is Run's, which a stop
// does: it stops the waves.
func (r *Relay) publish(ctx, bctx context.Context, b *batch) {
	if r.cfg.ordered {
		r.publishWaves(ctx, bctx, b)
		return
	}
	b.errs = r.publishOnce(bctx, b.send)
}

// settle acknowledges, reschedules and kills what became of a published
// batch, reports it, and returns its event, the destination error when the
// whole batch found the destination unavailable, and a store error. bctx is
// the batch's context (see batchContext), which a stop does not cancel; ctx
// is the relay's, which a stop does: the broker is asked whether it is down
// (a ping of up to the publish timeout) only while the relay is not
// stopping, so that a stop leaves the batch's acknowledgement its grace.
// While stopping, messages that found the broker unreachable are taken to
// have met an outage, and their attempts are given back.
func (r *Relay) settle(ctx, bctx context.Context, b *batch) (ev BatchEvent, unavailable error, err error) {
	ev = b.ev
	published := make([]error, 0, len(b.errs)) // the results of the messages that went to the broker
	for _, err := range b.errs {
		if err != errHeldBack {
			published = append(published, err)
		}
	}
	down := r.outage(ctx, published)
	if down != nil && wholeBatchUnavailable(published) != nil {
		unavailable = down // nothing got through: pause the relay
	}

	now := time.Now()
	f := r.decide(b, down, now)
	sctx, cancel := r.storeContext(bctx)
	defer cancel()
	sp := SettleParams{
		Sent:    f.sent,
		Retries: retryRows(f.retries),
		Refunds: append(f.refunds[:len(f.refunds):len(f.refunds)], f.heldBack...),
		Dead:    deadRows(f.dead),
	}
	before := ev // the call's own copy: an abandoned call must not share ev
	settled, err := bounded(sctx, func(sctx context.Context) (BatchEvent, error) {
		ev := before
		if b.held != nil {
			return ev, r.settleHeld(sctx, b.held, &ev, sp)
		}
		return ev, r.settleEach(sctx, &ev, sp)
	})
	if err == nil || !errors.Is(err, errAbandoned) {
		ev = settled
	}
	err = r.storeErr(sctx, err)
	ev.Err = err

	r.report(bctx, now, &f, down)
	r.batchDone(ev, b.start)
	return ev, unavailable, err
}

// fates is what became of the messages of a batch: each message is in
// exactly one of its lists.
type fates struct {
	sent     []*Message // confirmed by the broker
	retries  []failure  // failed: published again at their time, the attempt counted
	refunds  []Retry    // met a destination that is down: the attempt given back
	heldBack []Retry    // not published (waves.go): due again now, the attempt given back
	dead     []failure  // refused for good, out of attempts, or killed at claim time
}

// failure is a message that failed, with the error that says why and, for a
// retry, when it is due again.
type failure struct {
	msg *Message
	at  time.Time
	err error
}

// decide sorts the messages of a published batch by what becomes of them.
// down is the error that shows the destination down, or nil.
func (r *Relay) decide(b *batch, down error, now time.Time) fates {
	f := fates{dead: b.dead}
	for i, m := range b.send {
		switch err := b.errs[i]; {
		case err == nil:
			f.sent = append(f.sent, m)
		case err == errHeldBack: // never published: due again now, blocked behind its aggregate's failed row
			f.heldBack = append(f.heldBack, Retry{Message: m, At: now, Err: err.Error()})
		case down != nil && unreachable(err):
			f.refunds = append(f.refunds, Retry{Message: m, At: now.Add(jitter(r.cfg.probeInterval)), Err: err.Error()})
		case IsPermanent(err):
			f.dead = append(f.dead, failure{msg: m, err: err})
		case m.Attempt >= r.cfg.maxAttempts:
			f.dead = append(f.dead, failure{msg: m, err: fmt.Errorf("gave up after %d attempts: %w", m.Attempt, err)})
		default:
			f.retries = append(f.retries, failure{msg: m, at: now.Add(r.backoff(m.Attempt)), err: err})
		}
	}
	return f
}

// retryRows is what the store records of retries.
func retryRows(fs []failure) []Retry {
	if len(fs) == 0 {
		return nil
	}
	rows := make([]Retry, len(fs))
	for i, f := range fs {
		rows[i] = Retry{Message: f.msg, At: f.at, Err: f.err.Error()}
	}
	return rows
}

// deadRows is what the store records of dead messages.
func deadRows(fs []failure) []Dead {
	if len(fs) == 0 {
		return nil
	}
	rows := make([]Dead, len(fs))
	for i, f := range fs {
		rows[i] = Dead{Message: f.msg, Reason: f.err.Error()}
	}
	return rows
}

// settleHeld settles a batch whose rows the store holds in an open
// transaction, with one call that commits it.
func (r *Relay) settleHeld(ctx context.Context, held HeldClaim, ev *BatchEvent, sp SettleParams) error {
	n, err := held.Settle(ctx, sp)
	if err != nil {
		return fmt.Errorf("settle %d messages: %w", len(sp.Sent)+len(sp.Retries)+len(sp.Refunds)+len(sp.Dead), err)
	}
	ev.Sent = n
	ev.Fenced, ev.Gone = r.unacked(ctx, sp.Sent, n)
	ev.Retried, ev.Dead = len(sp.Retries), len(sp.Dead)
	return nil
}

// unacked splits the sent messages that the acknowledgement did not change
// (all but acked of them) into those whose rows another relay took over
// (fenced) and those whose rows are gone, when the store can count rows
// ([RowCounter]); otherwise, or when counting fails, all are fenced.
func (r *Relay) unacked(ctx context.Context, sent []*Message, acked int) (fenced, gone int) {
	fenced = len(sent) - acked
	rc, ok := r.store.(RowCounter)
	if fenced <= 0 || !ok {
		return fenced, 0
	}
	ids := make([]int64, len(sent))
	for i, m := range sent {
		ids[i] = m.RowID
	}
	present, err := rc.CountRows(ctx, ids)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelDebug, "count unacknowledged rows failed", slog.String(attrError, err.Error()))
		return fenced, 0
	}
	if r.cfg.deleteSent {
		present += acked // the acknowledgement deleted them
	}
	gone = min(max(len(sent)-present, 0), fenced)
	return fenced - gone, gone
}

// settleEach settles a batch with a store call for each fate.
func (r *Relay) settleEach(sctx context.Context, ev *BatchEvent, sp SettleParams) error {
	sent, retries, refunds, dead := sp.Sent, sp.Retries, sp.Refunds, sp.Dead
	var storeErrs []error
	if len(sent) > 0 {
		n, err := r.store.Ack(sctx, AckParams{Messages: sent, Delete: r.cfg.deleteSent})
		if err != nil {
			storeErrs = append(storeErrs, fmt.Errorf("ack %d messages: %w", len(sent), err))
		} else {
			ev.Sent = n
			ev.Fenced, ev.Gone = r.unacked(sctx, sent, n)
		}
	}
	if len(retries) > 0 {
		if err := r.store.Reschedule(sctx, RescheduleParams{Retries: retries}); err != nil {
			storeErrs = append(storeErrs, fmt.Errorf("reschedule %d messages: %w", len(retries), err))
		} else {
			ev.Retried = len(retries)
		}
	}
	if len(refunds) > 0 {
		if err := r.store.Reschedule(sctx, RescheduleParams{Retries: refunds, Refund: true}); err != nil {
			storeErrs = append(storeErrs, fmt.Errorf("release %d messages: %w", len(refunds), err))
		}
	}
	if len(dead) > 0 {
		if err := r.store.Kill(sctx, KillParams{Dead: dead}); err != nil {
			storeErrs = append(storeErrs, fmt.Errorf("mark %d messages dead: %w", len(dead), err))
		} else {
			ev.Dead = len(dead)
		}
	}
	return errors.Join(storeErrs...)
}

// unreachable reports whether err says the destination could not be reached
// (marked Unavailable, or timed out), as opposed to a refusal of the message.
func unreachable(err error) bool {
	return err != nil && !IsPermanent(err) && (IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded))
}

// wholeBatchUnavailable returns a representative error when every message of
// the batch failed as unreachable, and nil otherwise.
func wholeBatchUnavailable(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	for _, err := range errs {
		if !unreachable(err) {
			return nil
		}
	}
	return errs[0]
}

// outage decides whether the messages that failed as unreachable met
// a destination that is down, in which case their attempts are given back, or
// a problem of their own (a subject no stream captures), in which case the
// attempts count. A publisher that implements Pinger is asked; without one,
// the destination is down only when the whole batch failed as unreachable.
// It returns the error that shows the destination down, or nil.
func (r *Relay) outage(ctx context.Context, errs []error) error {
	var first error
	for _, err := range errs {
		if unreachable(err) {
			first = err
			break
		}
	}
	if first == nil {
		return nil
	}
	if p, ok := r.pub.(Pinger); ok {
		if err := r.ping(ctx, p); err != nil {
			return fmt.Errorf("%w (ping: %v)", first, err)
		}
		return nil
	}
	return wholeBatchUnavailable(errs)
}

// ping asks the publisher whether its destination answers, within the
// publish timeout: a broker that accepts the connection and then says
// nothing must not hold the relay (a settling batch, or the probe of a
// destination that is down) for longer than a publish would.
func (r *Relay) ping(ctx context.Context, p Pinger) error {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.publishTimeout)
	defer cancel()
	return p.Ping(pctx)
}

// report logs and hooks the fate of every message of a batch.
// decided is when the batch's fate was decided, which the retry delays count from.
func (r *Relay) report(ctx context.Context, decided time.Time, f *fates, unavailable error) {
	now := time.Now()
	for _, m := range f.sent {
		// Ack reports a count only, so a fenced or deleted row (BatchEvent.Fenced,
		// BatchEvent.Gone) is reported sent too: the broker did confirm it.
		r.message(MessageEvent{Message: m, Result: ResultSent, Latency: now.Sub(m.CreatedAt)})
	}
	for _, rt := range f.retries {
		m := rt.msg
		r.log.LogAttrs(ctx, slog.LevelWarn, "publish failed, will retry",
			slog.String(attrMessageID, m.MessageID), slog.String(attrEventType, m.EventType),
			slog.Int(attrAttempt, m.Attempt), slog.Duration(attrDelay, rt.at.Sub(decided)),
			slog.String(attrError, rt.err.Error()))
		r.message(MessageEvent{Message: m, Result: ResultRetry, Err: rt.err})
	}
	for _, rt := range f.refunds {
		r.message(MessageEvent{Message: rt.Message, Result: ResultUnavailable, Err: unavailable})
	}
	for _, rt := range f.heldBack {
		r.message(MessageEvent{Message: rt.Message, Result: ResultHeldBack, Err: errHeldBack})
	}
	for _, d := range f.dead {
		m := d.msg
		r.log.LogAttrs(ctx, slog.LevelError, "message dead", slog.Int64(attrRowID, m.RowID),
			slog.String(attrMessageID, m.MessageID), slog.String(attrAggregateID, m.AggregateID),
			slog.String(attrEventType, m.EventType), slog.Int(attrAttempt, m.Attempt),
			slog.String(attrError, d.err.Error()))
		r.message(MessageEvent{Message: m, Result: ResultDead, Err: d.err})
	}
}

// callHooks calls each of hooks under the relay's hook lock.
func callHooks[H any](r *Relay, hooks []H, call func(H)) {
	if len(hooks) == 0 {
		return
	}
	r.hookMu.Lock()
	defer r.hookMu.Unlock()
	for _, h := range hooks {
		call(h)
	}
}

func (r *Relay) message(ev MessageEvent) {
	callHooks(r, r.hMsg, func(h HookMessage) { h.OnMessage(ev) })
}

func (r *Relay) claimDone(err error) {
	callHooks(r, r.hClaim, func(h HookClaim) { h.OnClaim(err) })
}

func (r *Relay) destination(up bool, err error) {
	r.hookMu.Lock()
	defer r.hookMu.Unlock()
	for _, h := range r.hDest {
		h.OnDestination(up, err)
	}
}

func (r *Relay) batchDone(ev BatchEvent, start time.Time) {
	ev.Duration = time.Since(start)
	if ev.Claimed > 0 {
		r.log.LogAttrs(context.Background(), slog.LevelDebug, "batch done", slog.Int(attrBatchSize, ev.Claimed),
			slog.Int("sent", ev.Sent), slog.Int("retried", ev.Retried), slog.Int("dead", ev.Dead),
			slog.Int("fenced", ev.Fenced), slog.Int("gone", ev.Gone), slog.Duration("duration", ev.Duration))
	}
	if ev.Fenced > 0 {
		r.log.LogAttrs(context.Background(), slog.LevelWarn, "lease lost before ack, another relay owns the rows",
			slog.Int(attrCount, ev.Fenced))
	}
	if ev.Gone > 0 {
		r.log.LogAttrs(context.Background(), slog.LevelWarn, "rows deleted before ack by someone else, the broker has them",
			slog.Int(attrCount, ev.Gone))
	}
	r.hookMu.Lock()
	defer r.hookMu.Unlock()
	for _, h := range r.hBatch {
		h.OnBatch(ev)
	}
}

// backoff is the delay after failed attempt k: min(base × 2^(k-1), cap) with ±20% jitter.
func (r *Relay) backoff(attempt int) time.Duration {
	d := r.cfg.backoffBase
	for i := 1; i < attempt && d < r.cfg.backoffCap; i++ {
		d *= 2
	}
	return jitter(min(d, r.cfg.backoffCap))
}

// jitter spreads d by ±20% so that relays and messages do not retry in lockstep.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}

// sleep waits for d, a Notify, or ctx, whichever comes first.
func (r *Relay) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-r.wake:
	}
}

// pause waits for d or ctx; unlike sleep, new rows do not cut it short, so a
// relay whose destination is down does not probe on every write.
func (r *Relay) pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// listen keeps the store's notification listener running, restarting it after
// a failure; while it is down the relay polls.
func (r *Relay) listen(ctx context.Context, n Notifier) {
	wait := time.Second
	for ctx.Err() == nil {
		err := n.Listen(ctx, r.Notify)
		if ctx.Err() != nil {
			return
		}
		r.log.LogAttrs(ctx, slog.LevelWarn, "notification listener stopped, polling until it is back",
			slog.Any(attrError, err), slog.Duration(attrDelay, wait))
		t := time.NewTimer(jitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 30*time.Second)
	}
}
