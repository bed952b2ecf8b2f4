package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/faultproxy"
)

// The matrix. The short form (the default, run by `go test ./...`) is the
// subset in shortForm; OUTBOX_CHAOS=full runs every cell, longer.
var (
	// postgres-held is PostgreSQL with the relays' claims held in an open
	// transaction (--held-claims) instead of leased; its scenarios run
	// without ordering, since ordered claims are never held, and so are the
	// unordered control of every fault. Every other cell runs ordered, the
	// relay's default.
	// postgres-cdc is PostgreSQL with relays started with --source cdc:
	// they share one replication slot (one streams, the others stand by
	// and take over), with kept rows; its cells are in cdcCells.
	// postgres-cdc-deleted is the same with a Writer that deletes its
	// outbox rows (outbox.WithDeleteAfterInsert): messages in the log only.
	// postgres-contract and mysql-contract run on a table with only the
	// contract's indexes (Migrate's claim indexes dropped), as a team's
	// own table has: ordered claims then read the contract's indexes.
	matrixDBs = []string{"postgres", "postgres-held", "postgres-cdc", "postgres-cdc-deleted", "mysql",
		"postgres-contract", "mysql-contract"}
	matrixBrokers = []string{"nats", "redis"}
	matrixFaults  = []string{"kill9", "sigstop", "broker-cut", "broker-restart", "db-restart", "db-freeze", "pool", "longtx"}
	shortForm     = map[string]bool{
		"postgres/nats/kill9":          true,
		"postgres-held/nats/kill9":     true,
		"postgres/nats/sigstop":        true,
		"mysql/nats/db-restart":        true,
		"postgres/redis/broker-cut":    true,
		"postgres/nats/db-freeze":      true,
		"postgres-cdc/nats/kill9":      true,
		"postgres-contract/nats/kill9": true,
	}
)

// settings are read once from the environment.
type settings struct {
	full     bool          // OUTBOX_CHAOS=full: the whole matrix
	load     time.Duration // OUTBOX_CHAOS_LOAD: how long producers run under the nemesis
	seed     uint64        // OUTBOX_CHAOS_SEED: the base seed, printed by every scenario
	rate     float64       // producer transactions per second
	report   string        // OUTBOX_CHAOS_REPORT: where to write every report as one JSON file
	keepDirs bool          // OUTBOX_CHAOS_KEEP=1: keep data directories and logs even on success
}

func readSettings(t *testing.T) settings {
	s := settings{
		full: os.Getenv("OUTBOX_CHAOS") == "full", load: 8 * time.Second, rate: 60,
		seed: uint64(time.Now().UnixNano()), report: os.Getenv("OUTBOX_CHAOS_REPORT"),
		keepDirs: os.Getenv("OUTBOX_CHAOS_KEEP") == "1",
	}
	if s.full {
		s.load, s.rate = 30*time.Second, 80
	}
	if v := os.Getenv("OUTBOX_CHAOS_LOAD"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "OUTBOX_CHAOS_LOAD")
		s.load = d
	}
	if v := os.Getenv("OUTBOX_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "OUTBOX_CHAOS_SEED")
		s.seed = n
	}
	return s
}

// TestChaos runs the fault-injection scenarios: TestChaos/<db>/<broker>/<fault>.
// Each one starts a private database and broker, three relay processes of the
// real binary, producers and a consumer; injects its fault while the
// producers run; heals; drains; and checks the run with [Check].
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos scenarios skipped in -short mode")
	}
	set := readSettings(t)
	t.Logf("chaos: base seed %d (replay with OUTBOX_CHAOS_SEED=%d), load %v, full matrix: %v",
		set.seed, set.seed, set.load, set.full)
	var (
		mu      sync.Mutex
		reports []*Report
	)
	for _, db := range matrixDBs {
		t.Run(db, func(t *testing.T) {
			for _, broker := range matrixBrokers {
				t.Run(broker, func(t *testing.T) {
					for _, fault := range matrixFaults {
						sc := scenario{db: db, broker: broker, fault: fault}
						if !sc.inMatrix() || !set.full && !shortForm[sc.name()] {
							continue
						}
						t.Run(fault, func(t *testing.T) {
							rep := runScenario(t, sc, set)
							mu.Lock()
							reports = append(reports, rep)
							mu.Unlock()
						})
					}
				})
			}
		})
	}
	if len(reports) == 0 {
		return
	}
	t.Logf("chaos summary:\n%s", Table(reports...))
	if set.report != "" {
		b, err := json.MarshalIndent(reports, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(set.report, append(b, '\n'), 0o644))
		t.Logf("reports written to %s", set.report)
	}
}

// maxRecovery bounds the time from the end of the load (every fault healed,
// the producers stopped) to the last delivery.
const maxRecovery = 60 * time.Second

// minCommitted is the least traffic a scenario must carry to count.
const minCommitted = 100

// brokerLatency is added each way between the relays and the broker (by
// the fault proxy they reach it through), so that a relay spends most of its
// time with a batch in flight and a fault usually lands on one.
const brokerLatency = 25 * time.Millisecond

// scenario is one cell of the matrix.
type scenario struct{ db, broker, fault string }

func (s scenario) name() string { return s.db + "/" + s.broker + "/" + s.fault }

// run is the state of one scenario while it runs.
type run struct {
	t        *testing.T
	sc       scenario
	set      settings
	rng      *rand.Rand // the nemesis's randomness
	picks    int        // the nemesis's choices of a relay so far (pickRelay)
	dir      string
	aggs     int
	db       *database
	broker   *server
	proxy    *faultproxy.Proxy // between the relays and the broker
	dbProxy  *faultproxy.Proxy // between the relays and the database (db-freeze only)
	relays   *relays
	relayCfg relayConfig
	logOnly  bool    // the Writer deletes its outbox rows: messages are in the log only (CDC)
	drainLSN string  // logOnly: the end of the log when the drain began
	monitor  *sql.DB // the harness's own connections: in-flight sets, pending counts, truth
	work     *workload
	cons     consumer

	mu      sync.Mutex
	faults  []Fault
	stopped []map[string]int // sigstop: attempts of the in-flight rows at each SIGSTOP
	windows [][2]time.Time   // pool: when the server was out of connections
	extra   map[string]int64
	checks  []string
}

// scenarioDir makes the directory for a scenario's data and logs, readable
// by the PostgreSQL account. It is removed when the scenario passes.
func scenarioDir(t *testing.T, sc scenario, keep bool) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "outbox-chaos-"+strings.ReplaceAll(sc.name(), "/", "-")+"-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() {
		if t.Failed() || keep {
			t.Logf("data and logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// runScenario runs one scenario and returns its report; it fails t on any violation.
func runScenario(t *testing.T, sc scenario, set settings) *Report {
	h := fnv.New64a()
	h.Write([]byte(sc.name()))
	seed := set.seed ^ h.Sum64()
	bins.get(t) // build first, so the build time does not count against the scenario
	start := time.Now()
	r := &run{t: t, sc: sc, set: set, rng: rand.New(rand.NewPCG(seed, 1)), aggs: 50, extra: map[string]int64{}}
	r.dir = scenarioDir(t, sc, set.keepDirs)

	dbKind, contract := strings.CutSuffix(sc.db, "-contract")
	dbKind, held := strings.CutSuffix(dbKind, "-held")
	dbKind, deleted := strings.CutSuffix(dbKind, "-deleted")
	dbKind, cdc := strings.CutSuffix(dbKind, "-cdc")
	r.logOnly = deleted
	relayCfg := relayConfig{count: 3, loops: 1, ordered: !held, held: held, cdc: cdc}
	maxConns := 60
	producers := 4
	if sc.fault == "pool" {
		// A small server the hog can fill, and relays with small pools of
		// their own shared by several relay loops each.
		maxConns, relayCfg.loops, relayCfg.maxConns = 24, 3, 2
	}
	if sc.fault == "db-freeze" {
		relayCfg.storeTimeout = freezeStoreTimeout
	}
	r.relayCfg = relayCfg
	r.db = newDatabase(t, dbKind, r.dir, maxConns, r.aggs, dbOptions{logical: cdc, deleteRows: deleted,
		contractIndexes: contract})
	r.monitor = r.db.open(2)
	t.Cleanup(func() { r.monitor.Close() })
	conns := producers + 1
	if sc.fault == "longtx" {
		// Each long transaction holds a connection for 3-5 s, or longer
		// while it waits for an earlier one on its aggregate: with a new
		// one every 0.5-1.5 s, up to about ten are open at once. Without
		// room for them the producers waited for connections, and a long
		// transaction saw nothing written after it (a failed check that
		// says nothing about the relays).
		conns += longTxConns
	}
	business := r.db.open(conns)
	t.Cleanup(func() { business.Close() })
	require.NoError(t, warm(business, producers+1))
	require.NoError(t, warm(r.monitor, 2))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var directURL string
	switch sc.broker {
	case "nats":
		r.broker, directURL = startNATS(t, r.dir)
		c, err := newNATSConsumer(ctx, directURL)
		require.NoError(t, err)
		r.cons = c
	case "redis":
		r.broker, directURL = startRedis(t, r.dir)
		c, err := newRedisConsumer(directURL, eventType)
		require.NoError(t, err)
		r.cons = c
	}
	t.Cleanup(r.cons.close)
	r.proxy = faultproxy.New(t, fmt.Sprintf("127.0.0.1:%d", r.broker.port))
	r.proxy.Latency(brokerLatency)
	relayBroker := strings.Replace(directURL, fmt.Sprintf("127.0.0.1:%d", r.broker.port), r.proxy.Addr(), 1)
	relayDB := r.db.relayDSN
	if sc.fault == "db-freeze" {
		dbAddr := fmt.Sprintf("127.0.0.1:%d", r.db.srv.port)
		r.dbProxy = faultproxy.New(t, dbAddr)
		relayDB = strings.Replace(relayDB, dbAddr, r.dbProxy.Addr(), 1)
	}
	r.relays = startRelays(t, r.dir, relayDB, relayBroker, relayCfg)
	var slots *slotWatcher
	if cdc {
		slots = r.watchSlot()
	}

	setupDone := time.Now()
	r.work = &workload{d: r.db, db: business, tag: fmt.Sprintf("m%x", seed&0xffffff), cfg: workloadConfig{
		producers: producers, aggs: r.aggs, rate: set.rate, maxMsgs: 3,
		rollback: 0.1, slow: 0.02, slowMax: 500 * time.Millisecond,
	}}
	stopProducers, stop := context.WithCancel(context.Background())
	loadStart := time.Now()
	r.work.start(stopProducers, seed)
	load, endLoad := context.WithTimeout(context.Background(), set.load)
	nemesisDone := make(chan struct{})
	go func() {
		defer close(nemesisDone)
		nemeses[sc.fault](load, r)
	}()
	<-load.Done()
	endLoad()
	<-nemesisDone // every nemesis heals what it broke before it returns
	stop()
	r.work.wait()
	loadSeconds := time.Since(loadStart).Seconds()
	healed := time.Now() // every fault healed (each nemesis heals before it returns) and the producers stopped
	for _, slot := range r.relays.dead() {
		r.check("relay-%d was not running after the heal", slot+1)
		require.NoError(t, r.relays.start(slot))
	}

	drainStart := time.Now()
	drained := r.drain(90 * time.Second)
	for _, line := range r.relays.stopAll(15 * time.Second) {
		r.check("relay stop: %s", line)
	}
	if slots != nil {
		slots.stop()
		r.dropSlots()
	}

	tctx, tcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer tcancel()
	rows, err := r.db.truth(tctx, r.monitor)
	require.NoError(t, err, "read the database's final state")
	produces, hogs := r.work.history()
	deliveries := r.cons.deliveries()
	r.mu.Lock()
	faults := append([]Fault(nil), r.faults...)
	r.mu.Unlock()
	rep := Check(Input{Produces: produces, Rows: rows, Deliveries: deliveries, Faults: faults, Ordered: relayCfg.ordered,
		LogOnly: r.logOnly})
	rep.Scenario, rep.DB, rep.Broker, rep.Fault, rep.Seed = sc.name(), sc.db, sc.broker, sc.fault, set.seed
	rep.LoadSeconds = round1(loadSeconds)
	rep.RecoverySeconds = -1 // the drain gave up
	if drained {
		// From the moment everything was healed and the producers stopped to the last delivery.
		last := healed
		for _, d := range deliveries {
			if d.At.After(last) {
				last = d.At
			}
		}
		rep.RecoverySeconds = round1(last.Sub(healed).Seconds())
	}
	r.finish(rep, rows, produces, hogs, deliveries)
	if slots != nil {
		r.finishCDC(rep, rows, slots)
	}

	b, err := json.MarshalIndent(rep, "", "  ")
	require.NoError(t, err)
	reportPath := filepath.Join(reportDir(t), strings.ReplaceAll(sc.name(), "/", "-")+".json")
	require.NoError(t, os.WriteFile(reportPath, append(b, '\n'), 0o644))
	t.Logf("seed %d; setup %v, load %v, drain %v; report %s\n%s", set.seed, setupDone.Sub(start).Round(time.Millisecond),
		drainStart.Sub(setupDone).Round(time.Millisecond), time.Since(drainStart).Round(time.Millisecond), reportPath, Table(rep))
	for _, v := range rep.Violations() {
		t.Errorf("%s: %s", sc.name(), v)
	}
	return rep
}

// finish adds the relays' log counters and the scenario's own checks to rep.
func (r *run) finish(rep *Report, rows []Row, produces, hogs []Produce, deliveries []Delivery) {
	logs := r.relays.counts()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extra["relay_starts"] = int64(r.relays.started())
	var faultTime time.Duration
	for _, f := range r.faults {
		faultTime += f.Healed.Sub(f.At)
	}
	r.extra["fault_ms"] = faultTime.Milliseconds() // time spent broken (down, stopped, cut, exhausted)
	if rep.RecoverySeconds > maxRecovery.Seconds() {
		r.checks = append(r.checks, fmt.Sprintf("recovery took %.1fs, want at most %v", rep.RecoverySeconds, maxRecovery))
	}
	// A run that wrote little or injected nothing proves nothing.
	if rep.Committed < minCommitted {
		r.checks = append(r.checks, fmt.Sprintf("only %d messages committed: too little traffic to judge (want %d)",
			rep.Committed, minCommitted))
	}
	if r.sc.fault != "longtx" && len(r.faults) == 0 {
		r.checks = append(r.checks, "the nemesis injected no fault")
	}
	for key, msg := range map[string]string{
		"fenced_batches_logged":   "lease lost before ack, another relay owns the rows",
		"store_errors_logged":     "relay cycle failed",
		"store_timeouts_logged":   "database call timed out, will retry",
		"destination_down_logged": "destination unavailable, pausing",
		"publish_retries_logged":  "publish failed, will retry",
		"dead_logged":             "message dead",
	} {
		r.extra[key] = logs[msg]
	}
	if n := logs[logDataRace]; n > 0 {
		r.checks = append(r.checks, fmt.Sprintf("relay logs show %d data race reports", n))
	}
	if n := logs[logPanic]; n > 0 {
		r.checks = append(r.checks, fmt.Sprintf("relay logs show %d panics", n))
	}
	switch r.sc.fault {
	case "sigstop":
		// A takeover is a row the paused relay held that another relay
		// claimed again (its attempt count went up) while it slept.
		final := map[string]int{}
		for _, row := range rows {
			final[row.ID] = row.Attempts
		}
		var takeovers int64
		for _, at := range r.stopped {
			for id, n := range at {
				if final[id] > n {
					takeovers++
				}
			}
		}
		r.extra["takeovers"] = takeovers
	case "pool":
		var served int64
		for _, p := range produces {
			for _, w := range r.windows {
				if p.Outcome == OK && p.End.After(w[0]) && p.End.Before(w[1]) {
					served++
				}
			}
		}
		r.extra["commits_while_exhausted"] = served
		if len(r.windows) > 0 && served == 0 {
			r.checks = append(r.checks, "the business pool served no commit while the server was out of connections")
		}
		if r.extra["store_errors_logged"] == 0 {
			r.checks = append(r.checks, "the relays logged no database error: the exhaustion never reached them")
		}
	case "db-freeze":
		if r.extra["store_timeouts_logged"] == 0 {
			r.checks = append(r.checks, "the relays logged no database timeout: the freeze never reached them")
		}
	case "longtx":
		// Nothing stuck: while each committed hog held its early id open,
		// messages written after it began were delivered.
		var flowed, committed int64
		for _, hog := range hogs {
			if hog.Outcome != OK {
				continue
			}
			committed++
			later := map[string]bool{}
			for _, p := range produces {
				if p.Start.After(hog.Start) && p.Outcome == OK {
					for _, m := range p.Messages {
						later[m.ID] = true
					}
				}
			}
			passed := false
			for _, d := range deliveries {
				if d.At.Before(hog.End) && later[d.ID] {
					passed = true
					break
				}
			}
			if passed {
				flowed++
			} else {
				r.checks = append(r.checks, fmt.Sprintf("nothing written after hog %s began was delivered before it committed",
					hog.Messages[0].ID))
			}
		}
		r.extra["hogs"] = int64(len(hogs))
		if committed == 0 {
			r.checks = append(r.checks, "no long transaction committed")
		}
		r.extra["hogs_passed_while_open"] = flowed
	}
	rep.Extra = r.extra
	rep.Checks = append(rep.Checks, r.checks...)
}

// reportDir is where scenario reports go, one JSON file per scenario,
// replaced by the next run: it outlives the scenario's data directory.
func reportDir(t *testing.T) string {
	dir := filepath.Join(os.TempDir(), "outbox-chaos-reports")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// drain waits until every outbox row is sent and the consumer has read
// everything the broker holds, with no new delivery for a second. It
// reports whether that happened before timeout (and records a failed check
// if not).
func (r *run) drain(timeout time.Duration) bool {
	start := time.Now()
	deadline := start.Add(timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	pending := r.db.pending
	if r.logOnly {
		pending = r.slotBehind
	}
	for {
		qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := pending(qctx, r.monitor)
		qcancel()
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			what := "rows still pending"
			if r.logOnly {
				what = "bytes of log the slot has not confirmed"
			}
			r.check("drain: %d %s after %v (last error: %v)", n, what, timeout, err)
			return false
		}
		pause(100 * time.Millisecond)
	}
	r.mu.Lock()
	r.extra["drain_relays_ms"] = time.Since(start).Milliseconds() // until every row was sent
	r.mu.Unlock()
	seen, quietSince := len(r.cons.deliveries()), time.Now()
	for {
		if n := len(r.cons.deliveries()); n != seen {
			seen, quietSince = n, time.Now()
		}
		qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
		caught, err := r.cons.caughtUp(qctx)
		qcancel()
		if err == nil && caught && time.Since(quietSince) >= time.Second {
			r.mu.Lock()
			r.extra["drain_ms"] = time.Since(start).Milliseconds() // until the consumer caught up, quiet included
			r.mu.Unlock()
			return true
		}
		if time.Now().After(deadline) {
			r.check("drain: the consumer did not catch up with the broker within %v (last error: %v)", timeout, err)
			return false
		}
		pause(100 * time.Millisecond)
	}
}

// check records a failed scenario-specific pass condition.
func (r *run) check(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, fmt.Sprintf(format, args...))
}

// warm opens n connections of db at once and returns them to its pool, so
// the pool holds them before a fault.
func warm(db *sql.DB, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		if err := c.PingContext(ctx); err != nil {
			return err
		}
	}
	return nil
}

func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
