package soak_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/natspub"
	"github.com/outboxkit/outbox/store/pgstore"
)

// childEnv is set when the test binary runs as a relay process.
const childEnv = "OUTBOX_SOAK_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "relay" {
		os.Exit(runRelay())
	}
	os.Exit(m.Run())
}

// The relays' settings: sent rows are deleted at once (the table stays the
// size of the backlog), a lease that outlasts any pause the soak causes.
const (
	relayLease   = 15 * time.Second
	relayPoll    = 100 * time.Millisecond
	dupWindow    = 2 * time.Minute // the stream's: more than lease + restart
	sampleEvery  = 5 * time.Second
	aggregates   = 10_000
	memoryWarmup = 60 * time.Second
	vacuumEvery  = 30 * time.Second // when the server's autovacuum is off
	producers    = 4                // connections writing business transactions
)

// childStats is what a relay process prints on stdout every two seconds.
type childStats struct {
	Event                                string `json:"event,omitempty"`
	HeapInuse, HeapSys                   uint64
	Goroutines                           int
	Claimed, Sent, Retried, Dead, Fenced int64
	StoreErrors                          int64
}

// counters is a relay hook that counts what the relay did.
type counters struct {
	claimed, sent, retried, dead, fenced, storeErrors atomic.Int64
}

func (c *counters) OnBatch(ev outbox.BatchEvent) {
	c.claimed.Add(int64(ev.Claimed))
	c.sent.Add(int64(ev.Sent))
	c.retried.Add(int64(ev.Retried))
	c.dead.Add(int64(ev.Dead))
	c.fenced.Add(int64(ev.Fenced))
	if ev.Err != nil {
		c.storeErrors.Add(1)
	}
}

// runRelay is the relay process: PostgreSQL to NATS until SIGTERM.
func runRelay() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, `{"level":"ERROR","msg":"soak child failed","error":`+strconv.Quote(err.Error())+`}`)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := pgxpool.ParseConfig(os.Getenv("OUTBOX_SOAK_DSN"))
	if err != nil {
		return fail(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	st, err := pgstore.New(pool)
	if err != nil {
		return fail(err)
	}
	nc, err := nats.Connect(os.Getenv("OUTBOX_SOAK_NATS"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	pub, err := natspub.New(js, natspub.WithSubjectPrefix(os.Getenv("OUTBOX_SOAK_PREFIX")))
	if err != nil {
		return fail(err)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	hook := &counters{}
	relay, err := outbox.NewRelay(st, pub, outbox.WithDeleteSent(true), outbox.WithLease(relayLease),
		outbox.WithPollInterval(relayPoll), outbox.WithLogger(logger), outbox.WithHooks(hook),
		outbox.WithName(os.Getenv("OUTBOX_SOAK_NAME")))
	if err != nil {
		return fail(err)
	}
	enc := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	emit := func(s childStats) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(s)
	}
	var wg sync.WaitGroup
	statsCtx, stopStats := context.WithCancel(context.Background())
	wg.Go(func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			emit(childStats{HeapInuse: ms.HeapInuse, HeapSys: ms.HeapSys, Goroutines: runtime.NumGoroutine(),
				Claimed: hook.claimed.Load(), Sent: hook.sent.Load(), Retried: hook.retried.Load(),
				Dead: hook.dead.Load(), Fenced: hook.fenced.Load(), StoreErrors: hook.storeErrors.Load()})
			select {
			case <-statsCtx.Done():
				return
			case <-t.C:
			}
		}
	})
	emit(childStats{Event: "ready"})
	err = relay.Run(ctx)
	stopStats()
	wg.Wait()
	if err != nil {
		return fail(err)
	}
	emit(childStats{Event: "stopped"})
	return 0
}

// settings of a soak run.
type settings struct {
	messages     int
	rate         int
	restartEvery time.Duration
	report       string
}

func settingsFromEnv(t *testing.T) settings {
	s := settings{messages: 1_000_000, rate: 1200, restartEvery: 150 * time.Second, report: os.Getenv("OUTBOX_SOAK_REPORT")}
	if v := os.Getenv("OUTBOX_SOAK_MESSAGES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "OUTBOX_SOAK_MESSAGES")
		s.messages = n
	}
	if v := os.Getenv("OUTBOX_SOAK_RATE"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "OUTBOX_SOAK_RATE")
		s.rate = n
	}
	if v := os.Getenv("OUTBOX_SOAK_RESTART_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "OUTBOX_SOAK_RESTART_EVERY")
		s.restartEvery = d
	}
	return s
}

// logLine is one warning or error a relay process logged.
type logLine struct {
	Relay string
	Level string `json:"level"`
	Msg   string `json:"msg"`
	Error string `json:"error"`
	Raw   string
}

// relayProc is one run of a relay process.
type relayProc struct {
	name    string
	run     int // how many processes of this relay came before
	cmd     *exec.Cmd
	started time.Time
	ready   chan struct{}
	done    chan struct{}

	mu     sync.Mutex
	last   childStats
	exited error
}

// soak is the parent's view of a run.
type soak struct {
	t      *testing.T
	env    []string
	mu     sync.Mutex
	logs   []logLine
	events []event
	start  time.Time
}

type event struct {
	at   time.Duration
	what string
}

func (s *soak) event(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := event{at: time.Since(s.start).Round(time.Second), what: fmt.Sprintf(format, args...)}
	s.events = append(s.events, e)
	s.t.Logf("%v: %s", e.at, e.what)
}

func (s *soak) startRelay(name string, run int) *relayProc {
	s.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append([]string{}, s.env...), "OUTBOX_SOAK_NAME="+name)
	stdout, err := cmd.StdoutPipe()
	require.NoError(s.t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(s.t, err)
	require.NoError(s.t, cmd.Start())
	p := &relayProc{name: name, run: run, cmd: cmd, started: time.Now(), ready: make(chan struct{}), done: make(chan struct{})}
	var readers sync.WaitGroup
	readers.Go(func() {
		sc := bufio.NewScanner(stdout)
		var once sync.Once
		for sc.Scan() {
			var st childStats
			if json.Unmarshal(sc.Bytes(), &st) != nil {
				continue
			}
			switch st.Event {
			case "ready":
				once.Do(func() { close(p.ready) })
			case "":
				p.mu.Lock()
				p.last = st
				p.mu.Unlock()
			}
		}
	})
	readers.Go(func() { s.readLogs(name, stderr) })
	go func() {
		readers.Wait()
		err := cmd.Wait()
		p.mu.Lock()
		p.exited = err
		p.mu.Unlock()
		close(p.done)
	}()
	select {
	case <-p.ready:
	case <-p.done:
		s.t.Fatalf("relay %s exited before it was ready", name)
	case <-time.After(30 * time.Second):
		s.t.Fatalf("relay %s not ready after 30 s", name)
	}
	return p
}

func (s *soak) readLogs(name string, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := logLine{Relay: name, Raw: sc.Text()}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			l.Level, l.Msg = "RAW", sc.Text() // not a log record: a panic or the runtime
		}
		s.mu.Lock()
		s.logs = append(s.logs, l)
		s.mu.Unlock()
	}
}

// stop signals the process and waits for it; SIGTERM must end it cleanly.
func (p *relayProc) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("relay %s did not exit within 30 s of %v", p.name, sig)
	}
	if sig == syscall.SIGTERM {
		p.mu.Lock()
		defer p.mu.Unlock()
		require.NoError(t, p.exited, "relay %s after SIGTERM", p.name)
	}
}

// rss returns the resident set size of the process in bytes, 0 when it is gone.
func (p *relayProc) rss() uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// sample is the state of the run at one moment.
type sample struct {
	at                 time.Duration
	written, delivered int
	pending            int64
	tableBytes         int64
	rss, heap          [2]uint64
	runs               [2]int
	since              [2]time.Duration // age of each relay process
}

// delivery counts what the consumer received, by the sequence number in the payload.
type delivery struct {
	mu       sync.Mutex
	seen     []bool
	distinct int
	dups     int
	bad      int
}

func (d *delivery) add(data []byte) {
	var p struct{ Seq int }
	err := json.Unmarshal(data, &p)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case err != nil || p.Seq < 0 || p.Seq >= len(d.seen):
		d.bad++
	case d.seen[p.Seq]:
		d.dups++
	default:
		d.seen[p.Seq] = true
		d.distinct++
	}
}

func (d *delivery) counts() (distinct, dups, bad int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.distinct, d.dups, d.bad
}

// TestSoak is the soak run: see the package documentation.
func TestSoak(t *testing.T) {
	if os.Getenv("OUTBOX_SOAK") != "1" {
		t.Skip("set OUTBOX_SOAK=1 to run the soak (about a quarter of an hour; make soak)")
	}
	cfg := settingsFromEnv(t)
	pool, _, dsn := testsvc.PostgresSchema(t)
	ctx := context.Background()
	st, err := pgstore.New(pool)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	w := outbox.NewWriter[pgx.Tx](st)

	natsURL := testsvc.NATSURL(t)
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream := strings.ToUpper(testsvc.Name(t))
	testsvc.CreateStream(t, js, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"},
		Storage: jetstream.FileStorage, Duplicates: dupWindow, MaxAge: 30 * time.Minute})
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	got := &delivery{seen: make([]bool, cfg.messages)}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	cc, err := cons.Consume(func(m jetstream.Msg) { got.add(m.Data()) })
	require.NoError(t, err)
	t.Cleanup(cc.Stop)

	s := &soak{t: t, start: time.Now(), env: append(os.Environ(), childEnv+"=relay", "OUTBOX_SOAK_DSN="+dsn,
		"OUTBOX_SOAK_NATS="+natsURL, "OUTBOX_SOAK_PREFIX="+stream+".")}
	var relaysMu sync.Mutex
	relays := [2]*relayProc{s.startRelay("relay-0", 0), s.startRelay("relay-1", 0)}
	s.event("2 relays started; producing %d messages at %d/s", cfg.messages, cfg.rate)

	// The producers: business transactions at a steady rate, 1 to 20 messages
	// each, on several connections so that commit latency does not cap the rate.
	var written, reserved atomic.Int64
	var produceErr atomic.Value
	prodCtx, stopProducer := context.WithCancel(ctx)
	defer stopProducer()
	var bg sync.WaitGroup
	begin := time.Now()
	for range producers {
		bg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for reserved.Load() < int64(cfg.messages) {
				select {
				case <-prodCtx.Done():
					return
				case <-tick.C:
				}
				due := min(int64(time.Since(begin).Seconds()*float64(cfg.rate)), int64(cfg.messages))
				for {
					n := reserved.Load()
					if n >= due {
						break
					}
					k := min(due-n, 1+n%20)
					if !reserved.CompareAndSwap(n, n+k) {
						continue
					}
					msgs := make([]*outbox.Message, k)
					for i := range msgs {
						seq := int(n) + i
						msgs[i] = &outbox.Message{AggregateType: "order", AggregateID: "order-" + strconv.Itoa(seq%aggregates),
							EventType: "ORDER_PAID", Payload: fmt.Appendf(nil, `{"seq":%d,"amount_cents":%d,"currency":"EUR"}`, seq, 1000+seq%900)}
					}
					err := pgx.BeginFunc(prodCtx, pool, func(tx pgx.Tx) error { return w.Write(prodCtx, tx, msgs...) })
					if err != nil {
						if prodCtx.Err() == nil {
							produceErr.Store(err)
						}
						return
					}
					written.Add(k)
				}
			}
		})
	}

	// Deleted rows are reclaimed by VACUUM. Where the server runs autovacuum
	// (PostgreSQL's default), it does that; where it is off, as on some test
	// machines, the soak vacuums the table itself, as autovacuum would.
	var autovacuum string
	require.NoError(t, pool.QueryRow(ctx, "SHOW autovacuum").Scan(&autovacuum))
	vacCtx, stopVacuum := context.WithCancel(ctx)
	defer stopVacuum()
	var vacuums atomic.Int64
	if autovacuum != "on" {
		s.event("autovacuum is off on this server: the soak runs VACUUM on the outbox table every %v", vacuumEvery)
		bg.Go(func() {
			tick := time.NewTicker(vacuumEvery)
			defer tick.Stop()
			for {
				select {
				case <-vacCtx.Done():
					return
				case <-tick.C:
				}
				if _, err := pool.Exec(vacCtx, "VACUUM outbox_message"); err == nil {
					vacuums.Add(1)
				}
			}
		})
	}

	// The sampler.
	var samplesMu sync.Mutex
	var samples []sample
	sampCtx, stopSampler := context.WithCancel(ctx)
	defer stopSampler()
	bg.Go(func() {
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-sampCtx.Done():
				return
			case <-tick.C:
			}
			var sm sample
			sm.at = time.Since(s.start)
			sm.written = int(written.Load())
			sm.delivered, _, _ = got.counts()
			qctx, cancel := context.WithTimeout(sampCtx, 5*time.Second)
			_ = pool.QueryRow(qctx, `SELECT pg_total_relation_size('outbox_message'), (SELECT count(*) FROM outbox_message)`).
				Scan(&sm.tableBytes, &sm.pending)
			cancel()
			relaysMu.Lock()
			for i, p := range relays {
				sm.rss[i] = p.rss()
				p.mu.Lock()
				sm.heap[i] = p.last.HeapInuse
				p.mu.Unlock()
				sm.runs[i] = p.run
				sm.since[i] = time.Since(p.started)
			}
			relaysMu.Unlock()
			samplesMu.Lock()
			samples = append(samples, sm)
			samplesMu.Unlock()
		}
	})

	// Restarts: relay-0 every restartEvery, alternating SIGTERM and kill -9;
	// relay-1 once, by kill -9, when half the messages are written.
	restart := func(i int, sig syscall.Signal) {
		relaysMu.Lock()
		old := relays[i]
		relaysMu.Unlock()
		old.stop(t, sig)
		p := s.startRelay(old.name, old.run+1)
		relaysMu.Lock()
		relays[i] = p
		relaysMu.Unlock()
		s.event("%s restarted after %v (%v), run %d", old.name, sig, time.Since(old.started).Round(time.Second), p.run)
	}
	expected := time.Duration(float64(cfg.messages)/float64(cfg.rate)*float64(time.Second)) + 10*time.Minute
	deadline := time.Now().Add(expected)
	nextRestart := time.Now().Add(cfg.restartEvery)
	sigs := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}
	restarts, relay1Killed := 0, false
	for {
		distinct, _, _ := got.counts()
		if distinct >= cfg.messages {
			break
		}
		if err, _ := produceErr.Load().(error); err != nil {
			t.Fatalf("producer: %v", err)
		}
		require.False(t, time.Now().After(deadline), "only %d of %d delivered after %v", distinct, cfg.messages, expected)
		if written.Load() < int64(cfg.messages) && time.Now().After(nextRestart) {
			restart(0, sigs[restarts%2])
			restarts++
			nextRestart = time.Now().Add(cfg.restartEvery)
		}
		if !relay1Killed && written.Load() >= int64(cfg.messages/2) {
			restart(1, syscall.SIGKILL)
			relay1Killed = true
		}
		time.Sleep(time.Second)
	}
	s.event("all %d messages delivered", cfg.messages)
	testsvc.Eventually(t, time.Minute, func() bool {
		var n int64
		return pool.QueryRow(ctx, "SELECT count(*) FROM outbox_message").Scan(&n) == nil && n == 0
	}, "the table empties")
	relaysMu.Lock()
	final := relays
	relaysMu.Unlock()
	var totals childStats
	for _, p := range final {
		p.mu.Lock()
		totals.Dead += p.last.Dead
		totals.Fenced += p.last.Fenced
		p.mu.Unlock()
		p.stop(t, syscall.SIGTERM)
	}
	stopSampler()
	stopVacuum()
	stopProducer()
	bg.Wait()
	time.Sleep(2 * time.Second) // let late duplicates, if any, arrive before counting
	distinct, dups, bad := got.counts()

	samplesMu.Lock()
	defer samplesMu.Unlock()
	r := analyze(cfg, samples, s.logs, s.events, distinct, dups, bad)
	t.Log("\n" + r.markdown)
	if cfg.report != "" {
		require.NoError(t, os.WriteFile(cfg.report, []byte(r.markdown), 0o644))
	}
	require.Equal(t, cfg.messages, distinct, "every message delivered")
	require.Zero(t, bad, "no message the consumer could not read")
	require.Zero(t, dups, "re-sends after kill -9 fall in the stream's duplicate window")
	require.Empty(t, r.unexplained, "every warning and error the relays logged is explained")
	require.True(t, r.memoryFlat, "relay memory flat: %s", r.memoryNote)
	require.True(t, r.tableBounded, "table size bounded: %s", r.tableNote)
	require.Zero(t, totals.Dead, "nothing went dead")
}

// result is the soak's verdict and its report.
type result struct {
	markdown                 string
	unexplained              []string
	memoryFlat, tableBounded bool
	memoryNote, tableNote    string
}

// explanations are the warnings and errors a relay may log during the soak,
// and why. Anything else fails the run.
var explanations = []struct {
	msg, errorContains, why string
}{
	{"publish failed, will retry", "deadline exceeded",
		"a NATS acknowledgement took longer than the publish timeout on the loaded machine; the message is retried and the stream drops the copy by Nats-Msg-Id"},
	{"publish failed, will retry", "timeout",
		"as above, reported by the NATS client as a timeout"},
}

func explain(l logLine) (string, bool) {
	for _, e := range explanations {
		if l.Msg == e.msg && strings.Contains(l.Error, e.errorContains) {
			return e.why, true
		}
	}
	return "", false
}

func analyze(cfg settings, samples []sample, logs []logLine, events []event, distinct, dups, bad int) result {
	var r result
	var b strings.Builder
	mb := func(n uint64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }

	// Memory: for each relay process that lived long enough, the RSS of its
	// last third against its first third, after a warm-up minute.
	type life struct {
		name string
		run  int
		rss  []uint64
		age  []time.Duration
	}
	lives := map[string]*life{}
	var order []string
	var maxRSS uint64
	for _, s := range samples {
		for i := range 2 {
			if s.rss[i] == 0 {
				continue
			}
			key := fmt.Sprintf("relay-%d run %d", i, s.runs[i])
			l := lives[key]
			if l == nil {
				l = &life{name: fmt.Sprintf("relay-%d", i), run: s.runs[i]}
				lives[key] = l
				order = append(order, key)
			}
			l.rss = append(l.rss, s.rss[i])
			l.age = append(l.age, s.since[i])
			maxRSS = max(maxRSS, s.rss[i])
		}
	}
	median := func(xs []uint64) uint64 {
		ys := slices.Clone(xs)
		slices.Sort(ys)
		return ys[len(ys)/2]
	}
	r.memoryFlat = maxRSS < 150<<20
	var memLines []string
	checked := 0
	for _, key := range order {
		l := lives[key]
		var warm []uint64
		for i, a := range l.age {
			if a >= memoryWarmup {
				warm = append(warm, l.rss[i])
			}
		}
		if len(warm) < 18 { // under 1.5 minutes after warm-up: too short to judge a trend
			continue
		}
		checked++
		third := len(warm) / 3
		early, late := median(warm[:third]), median(warm[len(warm)-third:])
		growth := float64(late) / float64(early)
		ok := growth <= 1.25
		r.memoryFlat = r.memoryFlat && ok
		memLines = append(memLines, fmt.Sprintf("| %s (run %d) | %v | %s | %s | %s | %.2f |", l.name, l.run,
			l.age[len(l.age)-1].Round(time.Second), mb(early), mb(late), mb(slices.Max(warm)), growth))
	}
	if checked == 0 {
		r.memoryFlat = false
	}
	r.memoryNote = fmt.Sprintf("%d process lifetimes checked, largest RSS %s MB", checked, mb(maxRSS))

	// Table size: after a warm-up of two minutes, the largest size in the
	// second half of the run against the largest in the first half.
	var warmT []sample
	for _, s := range samples {
		if s.at >= 2*time.Minute && s.written < cfg.messages {
			warmT = append(warmT, s)
		}
	}
	r.tableBounded = len(warmT) >= 4
	var firstMax, secondMax int64
	for i, s := range warmT {
		if i < len(warmT)/2 {
			firstMax = max(firstMax, s.tableBytes)
		} else {
			secondMax = max(secondMax, s.tableBytes)
		}
	}
	if firstMax > 0 {
		r.tableBounded = r.tableBounded && float64(secondMax) <= 1.5*float64(firstMax)
	}
	r.tableNote = fmt.Sprintf("largest in the first half %s MB, in the second half %s MB", mb(uint64(firstMax)), mb(uint64(secondMax)))

	// Logs.
	explained := map[string]int{}
	whys := map[string]string{}
	for _, l := range logs {
		if why, ok := explain(l); ok {
			k := l.Msg + ": " + l.Error
			if len(k) > 120 {
				k = k[:120]
			}
			explained[k]++
			whys[k] = why
			continue
		}
		r.unexplained = append(r.unexplained, l.Relay+": "+l.Raw)
	}

	last := samples[len(samples)-1]
	// The achieved rate: up to the last sample taken while the producers still wrote.
	rate := 0.0
	for _, s := range samples {
		if s.written < cfg.messages && s.at > 0 {
			rate = float64(s.written) / s.at.Seconds()
		}
	}
	fmt.Fprintf(&b, "Run of %d messages written by business transactions of 1 to 20 messages over %d aggregates, on %d\n",
		cfg.messages, aggregates, producers)
	fmt.Fprintf(&b, "connections, at a target of %d/s (achieved: %.0f/s);\n", cfg.rate, rate)
	fmt.Fprintf(&b, "2 relay processes (PostgreSQL -> NATS JetStream, sent rows deleted, lease %v), relay-0 restarted every %v\n", relayLease, cfg.restartEvery)
	fmt.Fprintf(&b, "(SIGTERM and kill -9 in turn), relay-1 killed with kill -9 half way. Duration %v.\n\n", last.at.Round(time.Second))
	fmt.Fprintf(&b, "| check | result |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| delivered | %d distinct of %d, %d duplicates seen by the consumer, %d unreadable |\n", distinct, cfg.messages, dups, bad)
	fmt.Fprintf(&b, "| relay memory | %s; flat: %v |\n", r.memoryNote, r.memoryFlat)
	fmt.Fprintf(&b, "| outbox table | %s; bounded: %v |\n", r.tableNote, r.tableBounded)
	fmt.Fprintf(&b, "| warnings and errors logged | %d explained, %d unexplained |\n\n", len(logs)-len(r.unexplained), len(r.unexplained))
	if len(memLines) > 0 {
		fmt.Fprintf(&b, "RSS of each relay process that lived over 2.5 minutes (MB; medians of the first and last third after a 1-minute warm-up):\n\n")
		fmt.Fprintf(&b, "| process | lived | early | late | max | late/early |\n| --- | --- | --- | --- | --- | --- |\n")
		for _, l := range memLines {
			b.WriteString(l + "\n")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "Timeline (one line a minute):\n\n| t | written | delivered | rows in table | table MB | relay-0 RSS MB | relay-1 RSS MB |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	next := time.Duration(0)
	for _, s := range samples {
		if s.at < next && s != last {
			continue
		}
		next = s.at.Truncate(time.Minute) + time.Minute
		fmt.Fprintf(&b, "| %v | %d | %d | %d | %s | %s | %s |\n", s.at.Round(time.Second), s.written, s.delivered, s.pending,
			mb(uint64(s.tableBytes)), mb(s.rss[0]), mb(s.rss[1]))
	}
	fmt.Fprintf(&b, "\nEvents:\n\n")
	for _, e := range events {
		fmt.Fprintf(&b, "- %v: %s\n", e.at, e.what)
	}
	if len(explained) > 0 {
		fmt.Fprintf(&b, "\nExplained log lines:\n\n")
		for k, n := range explained {
			fmt.Fprintf(&b, "- %d × `%s`: %s\n", n, k, whys[k])
		}
	}
	for _, u := range r.unexplained {
		fmt.Fprintf(&b, "- UNEXPLAINED: `%s`\n", u)
	}
	r.markdown = b.String()
	return r
}
