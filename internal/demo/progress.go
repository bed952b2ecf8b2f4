package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox/internal/termsafe"
)

// progressMode is how progress is shown.
type progressMode int

const (
	progressNone  progressMode = iota // Quiet
	progressBar                       // a terminal: one line redrawn in place
	progressLines                     // a file or pipe: a line per second and per event
)

// Intervals between progress updates.
const (
	barEvery  = 100 * time.Millisecond
	lineEvery = time.Second
)

// progress writes what happens while the demo runs. Its methods are safe for
// concurrent use; every write to out goes through it.
type progress struct {
	out    io.Writer
	mode   progressMode
	start  time.Time
	status func(withBar bool) [2]string // the current state, in two lines without newlines

	mu    sync.Mutex
	drawn bool // the two bar lines are on screen, the cursor at the end of the second
}

func newProgress(out io.Writer, quiet bool, start time.Time, status func(withBar bool) [2]string) *progress {
	p := &progress{out: out, mode: progressLines, start: start, status: status}
	switch {
	case quiet:
		p.mode = progressNone
	case isTerminal(out):
		p.mode = progressBar
	}
	return p
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

// stamp is the elapsed time at the start of every line.
func (p *progress) stamp() string {
	return fmt.Sprintf("%5.1fs", time.Since(p.start).Seconds())
}

// event prints one line about something that happened, above the bar.
func (p *progress) event(format string, args ...any) {
	if p.mode == progressNone {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	fmt.Fprintf(p.out, "%s  %s\n", p.stamp(), termsafe.String(fmt.Sprintf(format, args...))) // args may hold a broker's error
	if p.mode == progressBar {
		p.drawLocked()
	}
}

// run updates the progress until ctx is done.
func (p *progress) run(ctx context.Context) {
	every := lineEvery
	switch p.mode {
	case progressNone:
		return
	case progressBar:
		every = barEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.tick()
		}
	}
}

func (p *progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == progressBar {
		p.drawLocked()
		return
	}
	st := p.status(false)
	fmt.Fprintf(p.out, "%s  %s  %s\n", p.stamp(), st[0], st[1])
}

// finish removes the bar, so that what follows starts on a clean line.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
}

// The terminal escapes the bar uses: erase to the end of the line, and move
// the cursor one line up. Every terminal since the VT100 knows them.
const (
	eraseLine = "\x1b[K"
	lineUp    = "\x1b[1A"
)

// drawLocked draws the status as two lines, over the previous ones.
func (p *progress) drawLocked() {
	st := p.status(true)
	if p.drawn {
		fmt.Fprint(p.out, lineUp)
	}
	fmt.Fprintf(p.out, "\r%s  %s%s\n%s%s", p.stamp(), st[0], eraseLine, st[1], eraseLine)
	p.drawn = true
}

// clearLocked erases the bar and leaves the cursor where it began.
func (p *progress) clearLocked() {
	if p.drawn {
		fmt.Fprint(p.out, "\r"+eraseLine+lineUp+"\r"+eraseLine)
		p.drawn = false
	}
}

// bar draws done out of total as a bar width characters wide.
func bar(done, total, width int) string {
	if total <= 0 {
		return strings.Repeat("░", width)
	}
	n := min(width, done*width/total)
	return strings.Repeat("█", n) + strings.Repeat("░", width-n)
}
