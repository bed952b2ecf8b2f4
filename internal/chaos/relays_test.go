package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Relay settings of every scenario: short enough that leases expire and
// messages are retried within seconds, with the lease more than twice the
// publish timeout as the relay demands.
const (
	relayBatch          = 20
	relayPoll           = 50 * time.Millisecond
	relayPublishTimeout = 2 * time.Second
	relayLease          = 4 * time.Second
	relayMaxAttempts    = 1000 // faults must never make a message dead
)

// relayConfig says how a scenario runs its relay processes.
type relayConfig struct {
	count    int  // processes
	loops    int  // relay loops per process (--relays)
	maxConns int  // --db-max-conns; 0 keeps the daemon's default
	ordered  bool // --ordering
	held     bool // --held-claims
	cdc      bool // --source cdc: the processes share one replication slot
	// storeTimeout is --store-timeout; 0 keeps the default.
	storeTimeout time.Duration
}

// relays are a scenario's relay processes: the real `outbox relay` binary,
// each in a slot that a nemesis can kill, stop and restart.
type relays struct {
	bin  string
	args []string
	env  []string
	dir  string

	mu     sync.Mutex
	procs  []*proc
	logs   []*logWatcher
	starts int
}

// relayReadyTimeout bounds a relay's start: connecting and checking the
// database and the broker.
const relayReadyTimeout = 30 * time.Second

// startRelays starts cfg.count relay processes against the database and
// broker URLs, logging to dir/relay-N.log.
func startRelays(t *testing.T, dir, dbURL, brokerURL string, cfg relayConfig) *relays {
	t.Helper()
	bin, _ := bins.get(t)
	args := []string{"relay", "--db", dbURL, "--broker", brokerURL, "--table", outboxTable,
		"--relays", strconv.Itoa(max(cfg.loops, 1)), "--batch-size", strconv.Itoa(relayBatch),
		"--poll-interval", relayPoll.String(), "--max-attempts", strconv.Itoa(relayMaxAttempts),
		"--backoff-base", "100ms", "--backoff-cap", "1s", "--publish-timeout", relayPublishTimeout.String(),
		"--lease", relayLease.String(), "--probe-interval", "200ms", "--max-probe-interval", "1s",
		"--log-format", "json", "--log-level", "info",
		// No scheduled archive: nothing is old enough, and its connection
		// would blur the pool scenario's count of the relays' connections.
		"--archive-every", "0"}
	if cfg.maxConns > 0 {
		args = append(args, "--db-max-conns", strconv.Itoa(cfg.maxConns))
	}
	// Ordering is on by default: the unordered cells turn it off.
	args = append(args, "--ordering="+strconv.FormatBool(cfg.ordered))
	if cfg.held {
		args = append(args, "--held-claims")
	}
	if cfg.cdc {
		args = append(args, "--source", "cdc")
	}
	if cfg.storeTimeout > 0 {
		args = append(args, "--store-timeout", cfg.storeTimeout.String())
	}
	// The daemon reads OUTBOX_* variables: pass none of the harness's own.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOX_") {
			env = append(env, kv)
		}
	}
	r := &relays{bin: bin, args: args, env: env, dir: dir}
	t.Cleanup(r.killAll)
	for i := range cfg.count {
		w, err := newLogWatcher(filepath.Join(dir, fmt.Sprintf("relay-%d.log", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		r.procs = append(r.procs, nil)
		r.logs = append(r.logs, w)
		if err := r.start(i); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// start starts the relay of a slot and waits until it reports that it runs.
func (r *relays) start(slot int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cmd := exec.Command(r.bin, r.args...)
	cmd.Env = r.env
	log := r.logs[slot]
	ready := log.waitFor(`"daemon started"`)
	p, err := startProc(fmt.Sprintf("relay-%d", slot+1), cmd, log)
	if err != nil {
		return err
	}
	r.procs[slot] = p
	r.starts++
	t := time.NewTimer(relayReadyTimeout)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-p.done:
		return fmt.Errorf("relay-%d exited at start (%v):\n%s", slot+1, p.err,
			tail(filepath.Join(r.dir, fmt.Sprintf("relay-%d.log", slot+1)), 2000))
	case <-t.C:
		p.kill()
		return fmt.Errorf("relay-%d not ready within %v", slot+1, relayReadyTimeout)
	}
}

// proc returns the process of a slot.
func (r *relays) proc(slot int) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[slot]
}

// started returns how many relay processes have been started, restarts included.
func (r *relays) started() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts
}

// count returns the number of slots.
func (r *relays) count() int { return len(r.logs) }

// kill kills the relay of a slot with SIGKILL.
func (r *relays) kill(slot int) { r.proc(slot).kill() }

// signal sends sig to the relay of a slot.
func (r *relays) signal(slot int, sig syscall.Signal) { r.proc(slot).signal(sig) }

// signalAll sends sig to the relay of every slot.
func (r *relays) signalAll(sig syscall.Signal) {
	for i := range r.count() {
		r.signal(i, sig)
	}
}

// dead returns the slots whose relay is not running.
func (r *relays) dead() []int {
	var out []int
	for i := range r.count() {
		if r.proc(i).exited() {
			out = append(out, i)
		}
	}
	return out
}

// stopAll stops every relay with SIGTERM and returns a line for each that
// did not exit cleanly within d.
func (r *relays) stopAll(d time.Duration) []string {
	var wg sync.WaitGroup
	errs := make([]error, r.count())
	for i := range r.count() {
		p := r.proc(i)
		wg.Go(func() { errs[i] = p.stop(d) })
	}
	wg.Wait()
	var out []string
	for i, err := range errs {
		if err != nil {
			out = append(out, fmt.Sprintf("relay-%d: %v", i+1, err))
		}
	}
	return out
}

// killAll kills whatever still runs and closes the logs.
func (r *relays) killAll() {
	for i := range r.count() {
		if p := r.proc(i); p != nil {
			p.kill()
		}
		_ = r.logs[i].close()
	}
}

// counts sums the log counters of every slot.
func (r *relays) counts() map[string]int64 {
	out := map[string]int64{}
	for _, w := range r.logs {
		for k, v := range w.snapshot() {
			out[k] += v
		}
	}
	return out
}
