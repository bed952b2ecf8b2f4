// Package probe runs a health probe once for every caller that asks while it
// runs, so that callers who give up (a flood of readiness requests against a
// broker that hangs) leave at most one goroutine behind, not one each.
package probe

import (
	"context"
	"runtime"
	"strings"
	"sync"
)

// Shared runs one probe at a time. Its zero value is ready to use; it is
// safe for concurrent use.
type Shared struct {
	mu  sync.Mutex
	cur *round
}

type round struct {
	done chan struct{} // closed once err is set
	err  error
}

// Do returns the result of probe, run on a goroutine started with spawn (go,
// or a WaitGroup's Go so that the owner can wait for it), or ctx's error if
// ctx ends first. A call made while a probe runs waits for that probe
// instead of starting another. probe must end on its own (a client timeout):
// no caller's ctx cancels it.
func (s *Shared) Do(ctx context.Context, spawn func(func()), probe func() error) error {
	s.mu.Lock()
	r := s.cur
	if r == nil {
		r = &round{done: make(chan struct{})}
		s.cur = r
		spawn(func() {
			err := probe()
			s.mu.Lock()
			r.err, s.cur = err, nil
			s.mu.Unlock()
			close(r.done)
		})
	}
	s.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Goroutines counts the goroutines whose stack has a function whose name
// contains fn, e.g. "amqppub.(*Publisher).Ping.func": for tests that check
// that probes do not pile up.
func Goroutines(fn string) int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}
