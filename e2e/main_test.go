// Package e2e_test runs the relay end to end against the real services: the
// outbox table in PostgreSQL, MySQL (MariaDB) or SQLite, the relay as a
// separate OS process (the test binary re-executed in child mode) so that
// kill -9 and SIGSTOP are real, and NATS JetStream with a consumer that
// counts every delivery.
package e2e_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/publisher/natspub"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// childEnv is set when the test binary runs as a relay process.
const childEnv = "OUTBOX_E2E_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "relay" {
		os.Exit(runChildRelay())
	}
	os.Exit(m.Run())
}

// childConfig is what a relay process is told through its environment.
type childConfig struct {
	DB, Table, NATS, Prefix string
	Batch                   int
	Lease, PublishTimeout   time.Duration
	Poll                    time.Duration
	PauseAfterPublish       time.Duration // widen the publish-to-ack window so a signal lands in it
}

func (c childConfig) environ() []string {
	return append(os.Environ(),
		childEnv+"=relay",
		"E2E_DB="+c.DB, "E2E_TABLE="+c.Table, "E2E_NATS="+c.NATS, "E2E_PREFIX="+c.Prefix,
		"E2E_BATCH="+strconv.Itoa(c.Batch), "E2E_LEASE="+c.Lease.String(),
		"E2E_PUBLISH_TIMEOUT="+c.PublishTimeout.String(), "E2E_POLL="+c.Poll.String(),
		"E2E_PAUSE_AFTER_PUBLISH="+c.PauseAfterPublish.String(),
	)
}

func childConfigFromEnv() (childConfig, error) {
	dur := func(k string) time.Duration { d, _ := time.ParseDuration(os.Getenv(k)); return d }
	batch, err := strconv.Atoi(os.Getenv("E2E_BATCH"))
	if err != nil {
		return childConfig{}, fmt.Errorf("E2E_BATCH: %w", err)
	}
	return childConfig{
		DB: os.Getenv("E2E_DB"), Table: os.Getenv("E2E_TABLE"), NATS: os.Getenv("E2E_NATS"),
		Prefix: os.Getenv("E2E_PREFIX"), Batch: batch, Lease: dur("E2E_LEASE"),
		PublishTimeout: dur("E2E_PUBLISH_TIMEOUT"), Poll: dur("E2E_POLL"),
		PauseAfterPublish: dur("E2E_PAUSE_AFTER_PUBLISH"),
	}, nil
}

// openStore opens the store named by a DSN: postgres://..., mysql://... or
// sqlite://PATH. The returned func closes what was opened.
func openStore(ctx context.Context, dsn, table string) (outbox.Store, func(), error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"):
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return nil, nil, err
		}
		st, err := pgstore.New(pool, pgstore.WithTable(table))
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return st, pool.Close, nil
	case strings.HasPrefix(dsn, "mysql://"):
		db, err := mysqlstore.Open(dsn)
		if err != nil {
			return nil, nil, err
		}
		st, err := mysqlstore.New(db, mysqlstore.WithTable(table))
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return st, func() { db.Close() }, nil
	case strings.HasPrefix(dsn, "sqlite://"):
		db, err := sqlitestore.Open(strings.TrimPrefix(dsn, "sqlite://"))
		if err != nil {
			return nil, nil, err
		}
		st, err := sqlitestore.New(db, sqlitestore.WithTable(table))
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return st, func() { db.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown db %q", dsn)
}

// batchLine is what a relay process prints for each batch (one JSON line on stdout).
type batchLine struct {
	Event                                string `json:"event"`
	Claimed, Sent, Retried, Dead, Fenced int
	Err                                  string `json:"err,omitempty"`
}

type stdoutHook struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (h *stdoutHook) emit(v batchLine) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.enc.Encode(v)
}

func (h *stdoutHook) OnBatch(ev outbox.BatchEvent) {
	l := batchLine{Event: "batch", Claimed: ev.Claimed, Sent: ev.Sent, Retried: ev.Retried, Dead: ev.Dead, Fenced: ev.Fenced}
	if ev.Err != nil {
		l.Err = ev.Err.Error()
	}
	h.emit(l)
}

// pausingPublisher tells the parent when a batch was confirmed by the broker and
// then holds the relay between publish and ack for a while, so that kill -9 and
// SIGSTOP land exactly in that window.
type pausingPublisher struct {
	outbox.Publisher
	hook  *stdoutHook
	pause time.Duration
}

func (p *pausingPublisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	errs := p.Publisher.Publish(ctx, msgs)
	if p.pause > 0 {
		p.hook.emit(batchLine{Event: "published", Claimed: len(msgs)})
		time.Sleep(p.pause)
	}
	return errs
}

func runChildRelay() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child relay:", err); return 1 }
	cfg, err := childConfigFromEnv()
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	st, closeStore, err := openStore(ctx, cfg.DB, cfg.Table)
	if err != nil {
		return fail(err)
	}
	defer closeStore()
	nc, err := nats.Connect(cfg.NATS)
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	np, err := natspub.New(js, natspub.WithSubjectPrefix(cfg.Prefix))
	if err != nil {
		return fail(err)
	}
	hook := &stdoutHook{enc: json.NewEncoder(os.Stdout)}
	relay, err := outbox.NewRelay(st, &pausingPublisher{Publisher: np, hook: hook, pause: cfg.PauseAfterPublish},
		outbox.WithOrdering(false, outbox.DeadBlocks), // as runRelay: these tests count leases and fences
		outbox.WithBatchSize(cfg.Batch), outbox.WithLease(cfg.Lease), outbox.WithPublishTimeout(cfg.PublishTimeout),
		outbox.WithPollInterval(cfg.Poll), outbox.WithBackoff(50*time.Millisecond, time.Second), outbox.WithHooks(hook))
	if err != nil {
		return fail(err)
	}
	hook.emit(batchLine{Event: "ready"})
	if err := relay.Run(ctx); err != nil {
		return fail(err)
	}
	hook.emit(batchLine{Event: "stopped"})
	return 0
}

// relayProc is a relay running as a child process.
type relayProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan batchLine
	done  chan struct{}
	mu    sync.Mutex
	all   []batchLine
}

func startRelay(t *testing.T, cfg childConfig) *relayProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = cfg.environ()
	cmd.Stderr = &testWriter{t: t, prefix: "relay stderr: "}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &relayProc{t: t, cmd: cmd, lines: make(chan batchLine, 4096), done: make(chan struct{})}
	go p.read(out)
	t.Cleanup(func() { p.kill() })
	p.waitFor(func(l batchLine) bool { return l.Event == "ready" }, 30*time.Second, "relay ready")
	return p
}

func (p *relayProc) read(r io.Reader) {
	defer close(p.done)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var l batchLine
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		p.mu.Lock()
		p.all = append(p.all, l)
		p.mu.Unlock()
		select {
		case p.lines <- l:
		default:
		}
	}
}

// fresh forgets the lines read but not yet waited for, so that the next
// waitFor sees only what the relay prints from now on.
func (p *relayProc) fresh() {
	for {
		select {
		case <-p.lines:
		default:
			return
		}
	}
}

// waitFor reads lines until one matches.
func (p *relayProc) waitFor(match func(batchLine) bool, timeout time.Duration, what string) {
	p.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-p.lines:
			if match(l) {
				return
			}
		case <-p.done:
			p.t.Fatalf("relay process exited while waiting for %s", what)
		case <-deadline:
			p.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

// totals sums the batch lines seen so far.
func (p *relayProc) totals() batchLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s batchLine
	for _, l := range p.all {
		if l.Event == "batch" {
			s.Claimed += l.Claimed
			s.Sent += l.Sent
			s.Retried += l.Retried
			s.Dead += l.Dead
			s.Fenced += l.Fenced
		}
	}
	return s
}

// errors returns the store errors the relay reported, at most max of them.
func (p *relayProc) errors(max int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []string
	for _, l := range p.all {
		if l.Err != "" && len(errs) < max {
			errs = append(errs, l.Err)
		}
	}
	return errs
}

func (p *relayProc) signal(sig syscall.Signal) {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *relayProc) kill() {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// stop sends SIGTERM and waits for a clean exit.
func (p *relayProc) stop(timeout time.Duration) error {
	p.signal(syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- p.cmd.Wait() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(timeout):
		p.signal(syscall.SIGKILL)
		return fmt.Errorf("relay did not exit within %v of SIGTERM", timeout)
	}
}

type testWriter struct {
	t      *testing.T
	prefix string
}

func (w *testWriter) Write(b []byte) (int, error) {
	w.t.Log(w.prefix + strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

var _ = sql.ErrNoRows
