package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process of the harness: a relay or a server. It runs in a
// process group of its own and dies with the harness (Pdeathsig), so a
// crashed test leaves nothing behind.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *logWatcher
	done chan struct{} // closed once the process exited and was reaped
	err  error         // Wait's result, set before done is closed
}

// startProc starts cmd with its stdout and stderr going to log.
func startProc(name string, cmd *exec.Cmd, log *logWatcher) (*proc, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process (not its group).
func (p *proc) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = syscall.Kill(p.pid(), sig)
	}
}

// kill sends SIGKILL to the process group and waits (bounded) until it is reaped.
func (p *proc) kill() {
	if !p.exited() {
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		_ = syscall.Kill(p.pid(), syscall.SIGKILL)
	}
	p.wait(10 * time.Second)
}

// wait waits up to d for the process to exit and reports whether it did.
func (p *proc) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// stop sends SIGTERM (after SIGCONT, in case it is stopped) and waits up to
// d for a clean exit, then kills it. It returns the exit error, or an error
// saying it had to be killed.
func (p *proc) stop(d time.Duration) error {
	if p.exited() {
		return fmt.Errorf("%s had already exited: %v", p.name, p.err)
	}
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	if !p.wait(d) {
		p.kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM", p.name, d)
	}
	return p.err
}

// children returns the ids of the processes whose parent is pid, read from /proc.
func children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []int
	for _, e := range entries {
		id, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(id); ok && ppid == pid {
			kids = append(kids, id)
		}
	}
	return kids
}

// parentOf reads the parent id of pid from /proc/pid/stat.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// gone reports whether pid no longer runs (absent, or a zombie).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && b[i+2] == 'Z'
}

// logWatcher is where a child's output goes: a file, plus a count of each
// JSON log line's "msg" and of lines with data races or panics, and a
// channel-based wait for a line containing some text.
type logWatcher struct {
	mu      sync.Mutex
	f       *os.File
	partial []byte
	counts  map[string]int64
	waiters []logWaiter
}

type logWaiter struct {
	substr string
	ch     chan struct{}
}

// newLogWatcher appends to the file at path.
func newLogWatcher(path string) (*logWatcher, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &logWatcher{f: f, counts: map[string]int64{}}, nil
}

// Write implements io.Writer.
func (w *logWatcher) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.f.Write(b)
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.line(w.partial[:i])
		w.partial = w.partial[i+1:]
	}
	if len(w.partial) > 64<<10 { // a line this long is not one we look for
		w.partial = w.partial[:0]
	}
	return n, err
}

// line counts one line. w.mu is held.
func (w *logWatcher) line(l []byte) {
	var rec struct {
		Msg string `json:"msg"`
	}
	if len(l) > 0 && l[0] == '{' && json.Unmarshal(l, &rec) == nil && rec.Msg != "" {
		w.counts[rec.Msg]++
	}
	s := string(l)
	switch {
	case strings.Contains(s, "WARNING: DATA RACE"):
		w.counts[logDataRace]++
	case strings.HasPrefix(s, "panic:") || strings.HasPrefix(s, "fatal error:"):
		w.counts[logPanic]++
	}
	kept := w.waiters[:0]
	for _, wt := range w.waiters {
		if strings.Contains(s, wt.substr) {
			close(wt.ch)
		} else {
			kept = append(kept, wt)
		}
	}
	w.waiters = kept
}

// Counters the watcher keeps besides the "msg" of JSON lines.
const (
	logDataRace = "DATA RACE"
	logPanic    = "PANIC"
)

// waitFor returns a channel closed when a line containing substr is written
// from now on.
func (w *logWatcher) waitFor(substr string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{})
	w.waiters = append(w.waiters, logWaiter{substr: substr, ch: ch})
	return ch
}

// snapshot returns a copy of the counts.
func (w *logWatcher) snapshot() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int64, len(w.counts))
	for k, v := range w.counts {
		out[k] = v
	}
	return out
}

// close closes the file.
func (w *logWatcher) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Close()
}

// tail returns the last n bytes of the log file at path, for failure messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, os.ErrClosed) {
		return string(b)
	}
	return string(b)
}
