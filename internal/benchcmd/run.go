package benchcmd

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/pgcdc"
)

// grace is how long a latency test waits, after the last write, for the
// messages still on their way.
const grace = 10 * time.Second

// warmup is how long a latency test writes at its rate before it measures:
// the relays start idle, and without a notification an idle relay finds
// the first rows only at its next poll, up to a poll interval later; then
// it sizes its batches up to the backlog of that interval and catches up,
// while the connections of the writers open. One second past the poll
// interval leaves the measurement to the steady rate it is about.
//
// The textbook relay gets none: it publishes about 100 messages a second,
// so a warm-up at 1,000 a second leaves it a backlog that outlasts its
// time, and it would deliver no measured message at all. Its first
// messages are measured, as its fixed poll makes every second alike.
func (c Config) warmup(relay string) time.Duration {
	if relay == relayTextbook {
		return 0
	}
	return c.PollInterval + time.Second
}

// Report is what a run measured. It is what `outbox bench --json` prints.
type Report struct {
	Started   time.Time `json:"started"`
	GoVersion string    `json:"go_version"`
	OS        string    `json:"os"`
	CPUs      int       `json:"cpus"`
	DB        string    `json:"db"`     // without credentials
	Broker    string    `json:"broker"` // without credentials
	// Table is the run's own outbox table (and stream), dropped at its end.
	Table    string   `json:"table"`
	Settings Settings `json:"settings"`

	// Drain holds the drain test of the outbox relay, then of the textbook
	// relay, then of the reference loop (when they run).
	Drain []DrainResult `json:"drain,omitempty"`
	// Latency holds the latency test of the outbox relay, then of the textbook relay.
	Latency []LatencyResult `json:"latency,omitempty"`
	// DrainRatio is the outbox relay's drain rate divided by the textbook relay's.
	DrainRatio float64 `json:"drain_ratio,omitempty"`
	// ReferenceRatio is the outbox relay's drain rate divided by the
	// reference loop's (Config.Reference).
	ReferenceRatio float64 `json:"reference_ratio,omitempty"`
	// LatencyRatio is the textbook relay's p99 latency divided by the outbox relay's.
	LatencyRatio float64 `json:"latency_p99_ratio,omitempty"`
	// Matrix is a matrix run's drains (Config.Matrix); the tests above are then not run.
	Matrix *MatrixResult `json:"matrix,omitempty"`
}

// Settings are the outbox relay's settings in a run.
type Settings struct {
	Relays         int     `json:"relays"`
	BatchSize      int     `json:"batch_size"`
	MaxInFlight    int     `json:"max_in_flight"`
	Adaptive       bool    `json:"adaptive,omitempty"` // BatchSize and MaxInFlight are upper bounds
	PollIntervalMs float64 `json:"poll_interval_ms"`
	DeleteSent     bool    `json:"delete_sent"`
	AsyncCommit    bool    `json:"async_commit,omitempty"` // PostgreSQL only
	Notify         bool    `json:"notify,omitempty"`       // PostgreSQL only
	// NotifyIntervalMs is how often, at most, writes notify; 0 means every write (PostgreSQL with Notify only).
	NotifyIntervalMs float64 `json:"notify_interval_ms,omitempty"`
	BatchLease       bool    `json:"batch_lease,omitempty"`    // PostgreSQL only
	HeldClaims       bool    `json:"held_claims,omitempty"`    // PostgreSQL only
	Source           string  `json:"source,omitempty"`         // the outbox relay's: polling, or cdc (PostgreSQL only)
	WriterDeletes    bool    `json:"writer_deletes,omitempty"` // writers delete their rows (cdc only)
	Payload          string  `json:"payload"`                  // json or binary
	Writers          int     `json:"writers"`                  // the latency test's concurrent write transactions
	Ordering         bool    `json:"ordering"`
	NoSlots          bool    `json:"no_slots,omitempty"` // ordered relays without slots
	Aggregates       int     `json:"aggregates"`         // the messages are spread over this many, round-robin
	// ContractIndexes: the table had only the contract's indexes (Config.ContractIndexes).
	ContractIndexes bool `json:"contract_indexes,omitempty"`
	SentRows        int  `json:"sent_rows,omitempty"` // sent rows the table kept ahead of each test's messages
}

// DrainResult is one relay's drain test: a preloaded backlog published.
type DrainResult struct {
	Relay      string  `json:"relay"` // "outbox", "textbook" or "reference"
	Rows       int     `json:"rows"`
	Delivered  int     `json:"delivered"` // confirmed by the broker before the clock stopped
	Complete   bool    `json:"complete"`  // every row delivered (the textbook relay may run out of time)
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	usage
}

// LatencyResult is one relay's latency test: a steady rate of one-message
// transactions, and the time from each commit to the broker's acknowledgement.
type LatencyResult struct {
	Relay         string  `json:"relay"`
	Rate          int     `json:"rate"`           // offered, per second
	Seconds       float64 `json:"seconds"`        // how long the measured writes went on
	WarmupSeconds float64 `json:"warmup_seconds"` // writes at the rate before the measurement, not counted
	Offered       int     `json:"offered"`        // transactions committed
	OfferedRate   float64 `json:"offered_rate"`   // what the writers achieved, per second
	Delivered     int     `json:"delivered"`      // acknowledged by the broker by the end
	// WriteErrors counts write transactions that failed (not in Offered),
	// and FirstWriteError is the first one's error.
	WriteErrors     int     `json:"write_errors,omitempty"`
	FirstWriteError string  `json:"first_write_error,omitempty"`
	P50Ms           float64 `json:"p50_ms"`
	P90Ms           float64 `json:"p90_ms"`
	P99Ms           float64 `json:"p99_ms"`
	P999Ms          float64 `json:"p999_ms"`
	MaxMs           float64 `json:"max_ms"`
	usage
	Series []LatencyPoint `json:"series,omitempty"`
}

// Run measures the outbox relay, and the textbook relay unless
// cfg.SkipBaseline, on cfg's database and broker, and writes the report to
// out: a table, or JSON with cfg.JSON. It creates a table and a stream of
// its own and removes them before it returns, also on error or when ctx is
// cancelled. Run may be called concurrently; runs do not share anything.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	dir, err := os.MkdirTemp("", "outbox-bench-*")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	name := "outbox_bench_" + randomHex(4)

	sizing := cfg
	if cfg.Matrix != "" {
		sizing = matrixSizing(cfg)
	}
	db, err := openDatabase(ctx, sizing, dir, name)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer db.close()
	br, err := openBroker(ctx, cfg.Broker, dir, name, max(4096, 2*sizing.Relays*sizing.MaxInFlight*sizing.BatchSize))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer br.close()

	r := &run{cfg: cfg, db: db, br: br, prog: newProgress(cfg.Progress)}
	if err := r.keepSent(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	rep := newReport(cfg, db, br)
	if cfg.Matrix != "" {
		if rep.Matrix, err = r.matrix(ctx); err != nil {
			return nil, fmt.Errorf("bench: matrix: %w", err)
		}
		if err := writeReport(out, rep, cfg.JSON); err != nil {
			return nil, fmt.Errorf("bench: write report: %w", err)
		}
		return rep, nil
	}
	if err := r.tests(ctx, rep); err != nil {
		return nil, err
	}
	rep.setRatios()
	if cfg.Chart != "" {
		if err := writeChart(cfg.Chart, rep); err != nil {
			return nil, fmt.Errorf("bench: chart: %w", err)
		}
	}
	if err := writeReport(out, rep, cfg.JSON); err != nil {
		return nil, fmt.Errorf("bench: write report: %w", err)
	}
	return rep, nil
}

// newReport returns the report of a run of cfg on db and br, with its
// machine and settings and no results yet.
func newReport(cfg Config, db *database, br *broker) *Report {
	rep := &Report{
		Started: time.Now().UTC(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		CPUs: runtime.NumCPU(), DB: db.desc, Broker: br.desc, Table: db.table,
		Settings: Settings{Relays: cfg.Relays, BatchSize: cfg.BatchSize, MaxInFlight: cfg.MaxInFlight, Adaptive: cfg.Adaptive,
			PollIntervalMs: float64(cfg.PollInterval) / float64(time.Millisecond), DeleteSent: cfg.DeleteSent,
			AsyncCommit: cfg.AsyncCommit && db.kind == "postgres", Notify: !cfg.NoNotify && db.kind == "postgres",
			BatchLease: cfg.BatchLease && db.kind == "postgres", HeldClaims: cfg.HeldClaims && db.kind == "postgres",
			Writers: cfg.Writers, Ordering: cfg.Ordering, NoSlots: cfg.NoSlots && cfg.Ordering, Aggregates: cfg.Aggregates, Source: cfg.Source,
			WriterDeletes: cfg.WriterDeletes, Payload: cmp.Or(cfg.Payload, PayloadJSON),
			ContractIndexes: cfg.ContractIndexes, SentRows: cfg.SentRows},
	}
	if rep.Settings.Notify {
		rep.Settings.NotifyIntervalMs = float64(max(cfg.NotifyInterval, 0)) / float64(time.Millisecond)
	}
	return rep
}

// tests runs each of the configured tests on each relay in turn (the
// outbox relay, then the textbook relay and the reference loop when they
// run) and adds their results to rep.
func (r *run) tests(ctx context.Context, rep *Report) error {
	relays := []string{relayOutbox}
	if !r.cfg.SkipBaseline {
		relays = append(relays, relayTextbook)
	}
	if r.cfg.Reference {
		relays = append(relays, relayReference)
	}
	for _, test := range r.cfg.Tests {
		for _, relay := range relays {
			switch {
			case test == TestDrain:
				res, err := r.drain(ctx, relay)
				if err != nil {
					return fmt.Errorf("bench: drain test of the %s relay: %w", relay, err)
				}
				rep.Drain = append(rep.Drain, *res)
			case test == TestLatency && relay != relayReference:
				res, err := r.latency(ctx, relay)
				if err != nil {
					return fmt.Errorf("bench: latency test of the %s relay: %w", relay, err)
				}
				rep.Latency = append(rep.Latency, *res)
			}
		}
	}
	return nil
}

// setRatios sets the report's ratios of the outbox relay to the textbook
// relay and the reference loop, from the results it holds.
func (rep *Report) setRatios() {
	for _, d := range rep.Drain[min(1, len(rep.Drain)):] {
		if d.MsgsPerSec == 0 {
			continue
		}
		switch ours := rep.Drain[0].MsgsPerSec / d.MsgsPerSec; d.Relay {
		case relayTextbook:
			rep.DrainRatio = ours
		case relayReference:
			rep.ReferenceRatio = ours
		}
	}
	if len(rep.Latency) == 2 && rep.Latency[0].P99Ms > 0 {
		rep.LatencyRatio = rep.Latency[1].P99Ms / rep.Latency[0].P99Ms
	}
}

// run is one Run's database, broker and progress.
type run struct {
	cfg  Config
	db   *database
	br   *broker
	prog *progress
	name string // the drain's name on the progress bar; "" means the relay's
}

// reset empties the table and the stream before a test.
func (r *run) reset(ctx context.Context) error {
	if err := r.db.clear(ctx); err != nil {
		return err
	}
	return r.br.purge(ctx)
}

// relays returns the runners of a test and the publisher they share.
func (r *run) relays(relay string, onAck func([]*outbox.Message, []error, time.Time)) ([]runner, *recording, error) {
	pub, err := r.br.publisher()
	if err != nil {
		return nil, nil, err
	}
	rec := &recording{Publisher: pub, onAck: onAck}
	switch relay {
	case relayTextbook:
		return []runner{&textbook{db: r.db, pub: rec}}, rec, nil
	case relayReference:
		rs := make([]runner, r.cfg.Relays)
		for i := range rs {
			rs[i] = newReference(r.db, rec, r.cfg.BatchSize, r.cfg.DeleteSent)
		}
		return rs, rec, nil
	}
	newStore := r.db.relayStore
	if newStore == nil {
		newStore = func() (outbox.Store, error) { return r.db.store, nil }
	}
	var src *pgcdc.Source
	if r.cfg.Source == SourceCDC {
		slot, pub := cdcNames(r.db.table)
		src, err = pgcdc.New(r.db.pool, r.db.dsn, pgcdc.WithTable(r.db.table), pgcdc.WithSlot(slot),
			pgcdc.WithPublication(pub), pgcdc.WithFallback(r.db.store))
		if err != nil {
			return nil, nil, err
		}
		newStore = func() (outbox.Store, error) { return src, nil }
	}
	rs, err := outboxRelays(r.cfg, newStore, rec)
	if src != nil {
		rs = append(rs, src) // one stream feeds every relay loop
	}
	return rs, rec, err
}

// cdcNames are the slot and the publication of the cdc source on table.
func cdcNames(table string) (slot, publication string) {
	return "outbox_" + table, "outbox_" + table + "_pub"
}

// cdcSlot creates, for a test of the outbox relay with source cdc, the
// publication and the slot before the test writes, so that the slot holds
// every row of the test (as after `outbox migrate --cdc`), and returns what
// drops them once the test's relays stopped. Otherwise it does nothing.
func (r *run) cdcSlot(ctx context.Context, relay string) (drop func(), err error) {
	if r.cfg.Source != SourceCDC || relay != relayOutbox {
		return func() {}, nil
	}
	slot, pub := cdcNames(r.db.table)
	if _, err := r.db.pool.Exec(ctx, "CREATE PUBLICATION "+pub+" FOR TABLE "+r.db.table+" WITH (publish = 'insert')"); err != nil {
		return nil, fmt.Errorf("cdc: create publication: %w", err)
	}
	drop = func() {
		// The server may count the slot active for a moment after the
		// source's connection closed: try again until it lets go.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), setupTimeout)
		defer cancel()
		_, _ = r.db.pool.Exec(dctx, "DROP PUBLICATION IF EXISTS "+pub)
		for {
			_, err := r.db.pool.Exec(dctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
			if err == nil || dctx.Err() != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if _, err := r.db.pool.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
		drop()
		return nil, fmt.Errorf("cdc: create slot (wal_level must be logical): %w", err)
	}
	return drop, nil
}

// start runs the runners until the returned stop is called; stop returns
// the first error a runner returned.
func start(ctx context.Context, runners []runner) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, len(runners))
	for _, rn := range runners {
		wg.Go(func() { errs <- rn.Run(ctx) })
	}
	return func() error {
		cancel()
		wg.Wait()
		close(errs)
		var all []error
		for err := range errs {
			all = append(all, err)
		}
		return errors.Join(all...)
	}
}

// stopTest ends a test: it stops the progress bar, then the relays, then
// the meter, and returns the meter's usage, or ctx's error when ctx ended,
// or else the relays' error.
func stopTest(ctx context.Context, stopBar func(), stop func() error, m *meter) (usage, error) {
	stopBar()
	runErr := stop()
	u := m.stop()
	if err := ctx.Err(); err != nil {
		return usage{}, err
	}
	return u, runErr
}

// message returns the i-th message of a test, of aggregate i mod aggs: the
// shape of a typical event, as JSON or, with binary, as as many bytes that
// are not UTF-8 under ContentTypeBinary.
func message(i, aggs int, binary bool) *outbox.Message {
	m := &outbox.Message{
		AggregateType: "order",
		AggregateID:   fmt.Sprintf("o-%d", i%aggs),
		EventType:     "ORDER_PAID",
		Payload: fmt.Appendf(nil, `{"order_id":"o-%d","amount_cents":%d,"currency":"EUR","customer":"c-%d"}`,
			i, 1000+i%900, i%5000),
	}
	if binary {
		for j := range m.Payload {
			m.Payload[j] |= 0x80 // every byte a continuation byte: never valid UTF-8, nor JSON
		}
		m.ContentType = ContentTypeBinary
	}
	return m
}

// drain preloads the backlog, then times the relay until the broker has
// confirmed all of it (or, for the textbook relay, until its time is up).
func (r *run) drain(ctx context.Context, relay string) (*DrainResult, error) {
	rows, limit := r.cfg.Rows, time.Duration(0)
	if relay == relayTextbook {
		// Enough for the textbook relay's time and a little more, never more than the test's rows.
		rows = min(rows, int(r.cfg.BaselineTime/textbookInterval+1)*textbookBatch*3/2)
		limit = r.cfg.BaselineTime
	}
	if err := r.reset(ctx); err != nil {
		return nil, err
	}
	dropSlot, err := r.cdcSlot(ctx, relay)
	if err != nil {
		return nil, err
	}
	defer dropSlot()
	if err := r.preload(ctx, rows); err != nil {
		return nil, err
	}
	runners, rec, err := r.relays(relay, nil)
	if err != nil {
		return nil, err
	}
	runtime.GC()
	stopProfile, err := r.profile(TestDrain, relay)
	if err != nil {
		return nil, err
	}
	m := startMeter()
	begin := time.Now()
	label := "drain " + relay
	if r.name != "" {
		label = r.name
	}
	stopBar := r.prog.show(label, func() (float64, string) {
		n := rec.confirmed.Load()
		el := time.Since(begin).Seconds()
		return float64(n) / float64(rows), fmt.Sprintf("%d/%d  %s msgs/s", n, rows, thousands(float64(n)/max(el, 1e-9)))
	})
	stop := start(ctx, runners)
	tick := time.NewTicker(2 * time.Millisecond)
	for rec.confirmed.Load() < int64(rows) && ctx.Err() == nil && (limit == 0 || time.Since(begin) < limit) {
		<-tick.C
	}
	tick.Stop()
	elapsed := time.Since(begin)
	u, err := stopTest(ctx, stopBar, stop, m)
	err = errors.Join(err, stopProfile())
	if err != nil {
		return nil, err
	}
	n := int(rec.confirmed.Load())
	res := &DrainResult{Relay: relay, Rows: rows, Delivered: n, Complete: n >= rows, Seconds: elapsed.Seconds(),
		MsgsPerSec: float64(n) / elapsed.Seconds(), usage: u}
	if res.Complete {
		if err := r.checkDelivered(ctx, rows); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// checkDelivered makes sure that the broker holds the rows and that the
// table has nothing pending, so that a report never shows a rate for work
// that was not done.
func (r *run) checkDelivered(ctx context.Context, rows int) error {
	stored, err := r.br.stored(ctx)
	if err != nil {
		return fmt.Errorf("count the stream: %w", err)
	}
	if stored != uint64(rows) {
		return fmt.Errorf("the stream holds %d messages, want %d", stored, rows)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := r.db.pending(ctx)
		if err != nil {
			return fmt.Errorf("count pending rows: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d rows still pending after the broker confirmed them all", n)
		}
		time.Sleep(20 * time.Millisecond) // acknowledgements still in flight when the relays stopped
	}
}

// preload writes rows messages in transactions of Config.TxRows, then
// refreshes the planner's statistics.
func (r *run) preload(ctx context.Context, rows int) error {
	if err := r.write(ctx, "preload", rows); err != nil {
		return err
	}
	if err := r.db.refreshStats(ctx); err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	return nil
}

// keepSent writes Config.SentRows messages and marks them sent (markSent
// refreshes the statistics once, after both), the history the table keeps
// through every test (database.clear leaves them).
func (r *run) keepSent(ctx context.Context) error {
	if r.cfg.SentRows == 0 {
		return nil
	}
	if err := r.write(ctx, "sent rows", r.cfg.SentRows); err != nil {
		return err
	}
	return r.db.markSent(ctx)
}

// write writes rows messages in transactions of Config.TxRows, showing
// progress as label.
func (r *run) write(ctx context.Context, label string, rows int) error {
	chunk := r.cfg.TxRows
	var done atomic.Int64
	stopBar := r.prog.show(label, func() (float64, string) {
		n := done.Load()
		return float64(n) / float64(rows), fmt.Sprintf("%d/%d rows", n, rows)
	})
	defer stopBar()
	for i := 0; i < rows; i += chunk {
		n := min(chunk, rows-i)
		msgs := make([]*outbox.Message, n)
		for j := range msgs {
			msgs[j] = message(i+j, r.cfg.Aggregates, r.cfg.Payload == PayloadBinary)
		}
		if err := r.db.write(ctx, msgs); err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		done.Add(int64(n))
	}
	return nil
}

// latency offers the rate for the test's duration, one message per
// transaction, and measures each message's time from commit to broker ack.
func (r *run) latency(ctx context.Context, relay string) (*LatencyResult, error) {
	dur := r.cfg.Duration
	if relay == relayTextbook {
		dur = min(dur, r.cfg.BaselineTime)
	}
	if err := r.reset(ctx); err != nil {
		return nil, err
	}
	dropSlot, err := r.cdcSlot(ctx, relay)
	if err != nil {
		return nil, err
	}
	defer dropSlot()
	warmup := r.cfg.warmup(relay)
	warm := int(int64(r.cfg.Rate) * int64(warmup) / int64(time.Second))
	measured := int(int64(r.cfg.Rate) * int64(dur) / int64(time.Second))
	total := warm + measured
	begin := time.Now()
	lat := newLatencies(begin.Add(warmup))
	runners, _, err := r.relays(relay, lat.acked)
	if err != nil {
		return nil, err
	}
	runtime.GC()
	stopProfile, err := r.profile(TestLatency, relay)
	if err != nil {
		return nil, err
	}
	m := startMeter()
	stop := start(ctx, runners)
	w := &latencyWriters{run: r, lat: lat, warm: warm}
	stopBar := r.prog.show(fmt.Sprintf("latency %s @%d/s", relay, r.cfg.Rate), func() (float64, string) {
		o := w.offeredSoFar()
		return float64(lat.delivered()) / float64(measured), fmt.Sprintf("offered %d  delivered %d  p99 %s",
			o, lat.delivered(), fmtMs(lat.quantileMs(99)))
	})
	w.write(ctx, begin, total)
	writing := time.Since(begin.Add(warmup))
	deadline := time.Now().Add(grace)
	for lat.delivered() < int(w.offered) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	u, err := stopTest(ctx, stopBar, stop, m)
	err = errors.Join(err, stopProfile())
	if err != nil {
		return nil, err
	}
	return w.result(relay, writing, u)
}

// latencyWriters are the writers of a latency test: they commit one
// message per transaction at the turns the pacer gives them, and count
// what they achieved.
type latencyWriters struct {
	run  *run
	lat  *latencies
	warm int // the turns before this one are the warm-up, not measured

	mu       sync.Mutex
	offered  int64 // measured transactions committed
	failed   int64 // transactions that failed, in the warm-up too
	firstErr error // the first failed transaction's error
}

// write runs Config.Writers writers and gives them turns 0..total-1 at the
// configured rate from begin, until ctx is done; it returns once every
// writer has finished. When the writers fall behind, the offered rate is
// what they achieve, and the report says so.
func (w *latencyWriters) write(ctx context.Context, begin time.Time, total int) {
	var committed sync.WaitGroup
	jobs := make(chan int)
	for range w.run.cfg.Writers {
		committed.Go(func() { w.writeTurns(ctx, jobs) })
	}
	interval := time.Second / time.Duration(w.run.cfg.Rate)
pace:
	for i := range total {
		if d := time.Until(begin.Add(time.Duration(i) * interval)); d > 200*time.Microsecond {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				break pace
			case <-t.C:
			}
		}
		select {
		case jobs <- i:
		case <-ctx.Done():
			break pace
		}
	}
	close(jobs)
	committed.Wait()
}

// writeTurns is one writer: it writes message i for each turn i from jobs,
// and records the commit time of the measured ones.
func (w *latencyWriters) writeTurns(ctx context.Context, jobs <-chan int) {
	for i := range jobs {
		msg := message(i, w.run.cfg.Aggregates, w.run.cfg.Payload == PayloadBinary)
		err := w.run.db.write(ctx, []*outbox.Message{msg})
		at := time.Now()
		w.mu.Lock()
		switch {
		case err != nil:
			w.failed++
			if w.firstErr == nil {
				w.firstErr = err
			}
		case i >= w.warm:
			w.offered++
		}
		w.mu.Unlock()
		if err == nil && i >= w.warm {
			w.lat.committed(msg.MessageID, at)
		}
	}
}

// offeredSoFar returns how many measured transactions have committed; it
// is safe to call while the writers run.
func (w *latencyWriters) offeredSoFar() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.offered
}

// result returns the latency test's result once the writers have
// finished: writing is how long the measured writes went on and u the
// test's resource usage. It fails when every write failed.
func (w *latencyWriters) result(relay string, writing time.Duration, u usage) (*LatencyResult, error) {
	if w.offered == 0 && w.failed > 0 {
		return nil, fmt.Errorf("every one of %d writes failed, the first with: %w", w.failed, w.firstErr)
	}
	res := w.lat.result()
	if w.failed > 0 {
		// The database could not take the offered rate next to this relay
		// (SQLite's single writer, say, behind the textbook relay's UPDATE
		// per row): a finding to report, not a reason to drop the run.
		res.WriteErrors, res.FirstWriteError = int(w.failed), w.firstErr.Error()
	}
	res.Relay, res.Rate, res.Offered, res.Seconds = relay, w.run.cfg.Rate, int(w.offered), writing.Seconds()
	res.WarmupSeconds = w.run.cfg.warmup(relay).Seconds()
	res.OfferedRate = float64(w.offered) / writing.Seconds()
	res.usage = u
	return &res, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
