package benchcmd

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Intervals between progress updates.
const (
	barEvery  = 100 * time.Millisecond // on a terminal, redrawn in place
	lineEvery = time.Second            // elsewhere, a line each time
	barWidth  = 30
)

// progress shows one bar at a time on out. A nil out shows nothing.
type progress struct {
	out io.Writer
	bar bool // out is a terminal
	mu  sync.Mutex
}

func newProgress(out io.Writer) *progress {
	return &progress{out: out, bar: isTerminal(out)}
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// show draws label's bar from status (a fraction done and a text) until the
// returned stop is called, which draws it a last time and ends the line.
func (p *progress) show(label string, status func() (float64, string)) (stop func()) {
	if p.out == nil {
		return func() {}
	}
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	draw := func(final bool) {
		frac, text := status()
		frac = min(max(frac, 0), 1)
		filled := int(frac * barWidth)
		line := fmt.Sprintf("%-24s [%s%s] %3.0f%%  %5.1fs  %s", label, strings.Repeat("#", filled),
			strings.Repeat(".", barWidth-filled), frac*100, time.Since(start).Seconds(), text)
		p.mu.Lock()
		defer p.mu.Unlock()
		switch {
		case p.bar && final:
			fmt.Fprintf(p.out, "\r\033[K%s\n", line)
		case p.bar:
			fmt.Fprintf(p.out, "\r\033[K%s", line)
		default:
			fmt.Fprintln(p.out, line)
		}
	}
	every := lineEvery
	if p.bar {
		every = barEvery
	}
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				draw(false)
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		draw(true)
	}
}
