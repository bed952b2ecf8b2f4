package sqlcore

import "sync/atomic"

// Pause counts down a number of uses in which a store skips a costly step
// that last found nothing to do (a read that came back empty, a scan that
// gave up), shared by the claims of one Store. The zero value is no pause.
type Pause struct{ left atomic.Int32 }

// Start makes the next n uses skip the step.
func (p *Pause) Start(n int32) { p.left.Store(n) }

// Skip reports whether this use falls in the pause, and counts it.
func (p *Pause) Skip() bool {
	for {
		n := p.left.Load()
		if n <= 0 {
			return false
		}
		if p.left.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// Left is how many more uses skip the step.
func (p *Pause) Left() int32 { return p.left.Load() }
