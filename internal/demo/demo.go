package demo

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/outbox/internal/redact"
)

// Broker states shown in the progress line.
const (
	brokerUp int32 = iota
	brokerDark
	brokerRefusing
)

// cleanupTimeout bounds dropping the run's tables and streams at the end,
// also after ctx was cancelled.
const cleanupTimeout = 10 * time.Second

// Run replays the incident on the three paths at once and returns what it
// counted. It prints progress to out while it runs (a bar redrawn in place
// when out is a terminal, a line per second otherwise, nothing when
// cfg.Quiet) and then the side-by-side table. It removes everything it
// created (temporary folder, tables, streams) before it returns, also when
// it fails or ctx is cancelled. Run may be called concurrently; each run
// has its own tables and streams.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Summary, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	r := &runner{cfg: cfg, seed: cfg.Seed}
	if r.seed == 0 {
		r.seed = mrand.Int64N(math.MaxInt32) + 1
	}
	r.d, _ = dbKind(cfg.DB) // validated
	r.id = newRunID()
	defer r.close()
	if err := r.setup(ctx); err != nil {
		return nil, fmt.Errorf("demo: set up: %w", err)
	}
	s, err := r.run(ctx, out)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	return s, nil
}

// runner holds one run's services and what it created.
type runner struct {
	cfg  Config
	seed int64
	id   string // names this run's tables and streams
	d    dialect

	dir    string          // temporary folder: SQLite files, embedded NATS storage
	broker *broker         // NATS, embedded or given, behind the fault proxy
	dbs    []*sql.DB       // closed by close
	pools  []*pgxpool.Pool // PostgreSQL only, closed by close after dbs
	// PostgreSQL only: the payment services' pool, and database/sql
	// handles on it and on the shipping services' pool.
	payPool       *pgxpool.Pool
	payDB, shipDB *sql.DB
	paths         []*path // in pathKinds order
	cleanup       []func(context.Context) error

	start   time.Time
	arrived atomic.Int64 // orders whose payment has started
	state   atomic.Int32 // brokerUp, brokerDark, brokerRefusing
}

// newRunID returns 8 random lower-case hex digits.
func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// run pays the orders on every path while the broker goes dark, waits for
// every path to deliver what it will, and counts.
func (r *runner) run(ctx context.Context, out io.Writer) (*Summary, error) {
	declined, offsets := r.plan()
	nDeclined := trues(declined)
	r.intro(out, nDeclined)
	r.start = time.Now()
	prog := newProgress(out, r.cfg.Quiet, r.start, r.status)
	defer prog.finish() // last, once the goroutines below stopped drawing

	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	for _, p := range r.paths {
		p.ship.start = r.start
		if err := p.ship.run(bg, &wg); err != nil {
			return nil, fmt.Errorf("start shipping (%s): %w", p.kind.key(), err)
		}
		if p.relay != nil {
			wg.Go(func() { _ = p.relay.Run(bg) }) // returns nil when bg ends
		}
		if p.cdc != nil {
			wg.Go(func() { _ = p.cdc.Run(bg) })
		}
	}
	wg.Go(func() { prog.run(bg) })
	outageOver := make(chan struct{})
	wg.Go(func() {
		defer close(outageOver)
		r.outage(bg, prog)
	})

	prog.event("paying %d orders over %s on each path", r.cfg.Orders, seconds(r.cfg.PayTime))
	r.pay(bg, declined, offsets)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	prog.event("all payments made; waiting for the relay and the shipping service to finish")
	select {
	case <-outageOver:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := r.drain(ctx); err != nil {
		return nil, err
	}
	elapsed := time.Since(r.start)
	prog.event("every path has delivered what it will")
	stop()
	wg.Wait()
	prog.finish()

	s, err := r.summarize(ctx, nDeclined, elapsed)
	if err != nil {
		return nil, err
	}
	if !r.cfg.Quiet {
		fmt.Fprintln(out)
	}
	if err := s.writeTable(out); err != nil {
		return nil, fmt.Errorf("print summary: %w", err)
	}
	return s, nil
}

// summarize counts every path's outcome.
func (r *runner) summarize(ctx context.Context, declined int, elapsed time.Duration) (*Summary, error) {
	s := &Summary{
		Orders: r.cfg.Orders, Declined: declined, Seed: r.seed, Run: r.id,
		DB: r.dbDesc(), Broker: r.broker.desc,
		OutageAt: r.cfg.OutageAt, OutageFor: r.cfg.OutageFor,
		Elapsed: elapsed,
	}
	for _, p := range r.paths {
		res, err := r.result(ctx, p, declined)
		if err != nil {
			return nil, err
		}
		switch p.kind {
		case naive:
			s.Naive = res
		case publishFirst:
			s.PublishFirst = res
		case viaOutbox:
			s.Outbox = res
		}
	}
	return s, nil
}

// plan picks the declined orders and each order's arrival time, from the seed.
// Order i arrives at a random moment of its own slot of PayTime/Orders, so
// arrivals are even overall and in id order.
func (r *runner) plan() (declined []bool, offsets []time.Duration) {
	n := r.cfg.Orders
	rng := mrand.New(mrand.NewPCG(uint64(r.seed), 0x6f7574626f78)) // "outbox"
	declined = make([]bool, n)
	k := int(math.Round(r.cfg.Declines * float64(n)))
	for _, i := range rng.Perm(n)[:k] {
		declined[i] = true
	}
	slot := float64(r.cfg.PayTime) / float64(n)
	offsets = make([]time.Duration, n)
	for i := range offsets {
		offsets[i] = time.Duration((float64(i) + rng.Float64()) * slot)
	}
	return declined, offsets
}

// trues counts the true values of bs.
func trues(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// intro prints what the demo is about to do.
func (r *runner) intro(out io.Writer, declined int) {
	if r.cfg.Quiet {
		return
	}
	cfg := r.cfg
	fmt.Fprintf(out, `outbox demo: a payment service marks %d orders paid over %s; a shipping service ships
each order when its message arrives. The broker goes dark from %s to %s (the network
stops answering, then connections are refused). %d payments are declined and roll back.
Three versions of the payment code run side by side, each with its own tables and stream:
  naive          commit, then publish (retry once, then log the error and move on)
  publish-first  publish, then commit
  outbox         the order and its message in one transaction; a relay publishes
Database: %s. Broker: %s, reached through a fault proxy.

`, cfg.Orders, seconds(cfg.PayTime), seconds(cfg.OutageAt), seconds(cfg.OutageAt+cfg.OutageFor), declined,
		r.dbDesc(), r.broker.desc)
}

// status is the progress: payments and the broker, then the deliveries.
func (r *runner) status(withBar bool) [2]string {
	var top, bottom strings.Builder
	n := int(r.arrived.Load())
	if withBar {
		top.WriteString(bar(n, r.cfg.Orders, 20) + " ")
	}
	fmt.Fprintf(&top, "%d/%d orders   broker %s", n, r.cfg.Orders,
		[...]string{"up", "DARK", "REFUSING"}[r.state.Load()])
	if withBar {
		bottom.WriteString("        ") // under the bar, past the time
	}
	bottom.WriteString("shipped:")
	for i, p := range r.paths {
		if i > 0 {
			bottom.WriteString(" ·")
		}
		fmt.Fprintf(&bottom, " %s %d", p.kind.key(), p.ship.shipped.Load())
		if p.relay != nil {
			fmt.Fprintf(&bottom, " (backlog %d)", max(0, p.paid.Load()-p.relaySent.Load()))
		}
	}
	return [2]string{top.String(), bottom.String()}
}

// pay starts each order's payment on every path at its arrival time, like
// requests reaching a service, and waits for all of them to return.
func (r *runner) pay(ctx context.Context, declined []bool, offsets []time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, at := range offsets {
		if !pause(ctx, time.Until(r.start.Add(at))) {
			return
		}
		r.arrived.Store(int64(i + 1))
		for _, p := range r.paths {
			wg.Go(func() { p.pay(ctx, i+1, declined[i]) })
		}
	}
}

// outage breaks the network between the services and the broker: it stops
// answering for the first half of the window (faultproxy Blackhole), then
// connections are refused (Cut), then the network is back (Restore).
func (r *runner) outage(ctx context.Context, prog *progress) {
	p := r.broker.proxy
	defer func() {
		p.Restore()
		r.state.Store(brokerUp)
	}()
	at := r.start.Add(r.cfg.OutageAt)
	steps := []struct {
		at    time.Time
		state int32
		apply func()
		say   string
	}{
		{at, brokerDark, p.Blackhole, "broker dark: the network stops answering, publishes hang until they time out"},
		{at.Add(r.cfg.OutageFor / 2), brokerRefusing, p.Cut, "broker refusing connections: publishes fail at once"},
		{at.Add(r.cfg.OutageFor), brokerUp, p.Restore, "broker back"},
	}
	for _, s := range steps {
		if !pause(ctx, time.Until(s.at)) {
			return
		}
		s.apply()
		r.state.Store(s.state)
		prog.event("%s", s.say)
	}
}

// drain waits until the outbox table has nothing pending and every shipping
// service has processed its whole stream, or fails after DrainTimeout. It
// starts once the last payment returned and the broker is back.
func (r *runner) drain(ctx context.Context) error {
	deadline := time.Now().Add(r.cfg.DrainTimeout)
	for {
		left, err := r.undelivered(ctx)
		if err != nil {
			return err
		}
		if left == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("did not drain within %s: %s", r.cfg.DrainTimeout, left)
		}
		if !pause(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// undelivered describes what is still on its way, or returns "" when nothing is.
func (r *runner) undelivered(ctx context.Context) (string, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var left []string
	for _, p := range r.paths {
		if p.store != nil {
			st, err := p.store.Stats(qctx)
			if err != nil {
				return "", fmt.Errorf("outbox stats: %w", err)
			}
			if st.Pending > 0 {
				left = append(left, fmt.Sprintf("%d messages still pending in the outbox table (is the broker reachable?)", st.Pending))
				continue
			}
		}
		ok, err := p.ship.caughtUp(qctx)
		if err != nil {
			return "", err
		}
		if !ok {
			left = append(left, fmt.Sprintf("the shipping service of the %s path has not processed its whole stream", p.kind.key()))
		}
	}
	return strings.Join(left, "; "), nil
}

// result counts one path's outcome with queries over its tables.
func (r *runner) result(ctx context.Context, p *path, declined int) (PathResult, error) {
	c, err := count(ctx, p.db, p.ship.db, p.t)
	if err != nil {
		return PathResult{}, fmt.Errorf("%s: %w", p.kind.key(), err)
	}
	res := PathResult{
		Name:               p.kind.key(),
		Paid:               c.paid,
		Failed:             c.unpaid - declined,
		Delivered:          c.shipments,
		Stuck:              c.stuck,
		Ghosts:             c.ghosts,
		DuplicatesSeen:     p.ship.duplicatesSeen(),
		DuplicatesAbsorbed: int(p.ship.absorbed.Load()),
		FailedAttempts:     int(p.failedAttempt.Load()),
		Lost:               int(p.lost.Load()),
		LastShipment:       time.Duration(p.ship.lastShip.Load()),
	}
	if p.store != nil {
		st, err := p.store.Stats(ctx)
		if err != nil {
			return PathResult{}, fmt.Errorf("outbox stats: %w", err)
		}
		res.Dead = int(st.Dead)
	}
	return res, nil
}

// dbDesc describes the database for the intro and the summary.
func (r *runner) dbDesc() string {
	if r.d == postgresDialect {
		return "PostgreSQL at " + redact.URLs(r.cfg.DB)
	}
	return "SQLite in a temporary folder"
}

// onCleanup registers f to run at close, in reverse order.
func (r *runner) onCleanup(f func(context.Context) error) { r.cleanup = append(r.cleanup, f) }

// close drops what the run created and closes what it opened, in reverse order.
func (r *runner) close() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var errs []error
	for i := len(r.cleanup) - 1; i >= 0; i-- {
		errs = append(errs, r.cleanup[i](ctx))
	}
	for _, db := range r.dbs {
		errs = append(errs, db.Close())
	}
	for _, p := range r.pools {
		p.Close()
	}
	if r.broker != nil {
		r.broker.close()
	}
	if r.dir != "" {
		errs = append(errs, os.RemoveAll(r.dir))
	}
	if err := errors.Join(errs...); err != nil {
		r.cfg.Logger.Warn("demo cleanup incomplete", "error", err.Error())
	}
}
