package benchcmd

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/outboxkit/outbox"
)

// Range of the latency histograms: 1 µs to 10 min, three significant digits.
const (
	histMin     = 1
	histMax     = int64(10 * time.Minute / time.Microsecond)
	histSigFigs = 3
)

// LatencyPoint is one second of the latency test, by commit time.
type LatencyPoint struct {
	Second    int     `json:"second"` // seconds since the test started
	Delivered int     `json:"delivered"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
}

// latencies pairs each message's commit with its broker acknowledgement and
// keeps the distribution of the differences. It is safe for concurrent use.
type latencies struct {
	start time.Time

	mu      sync.Mutex
	commits map[string]time.Time // committed, not yet acknowledged
	early   map[string]time.Time // acknowledged before its commit was recorded
	done    map[string]bool      // counted; later copies (duplicates) are ignored
	all     *hdrhistogram.Histogram
	seconds []*hdrhistogram.Histogram // by commit second
}

func newLatencies(start time.Time) *latencies {
	return &latencies{
		start:   start,
		commits: map[string]time.Time{},
		early:   map[string]time.Time{},
		done:    map[string]bool{},
		all:     hdrhistogram.New(histMin, histMax, histSigFigs),
	}
}

// committed records that id's transaction committed at t.
func (l *latencies) committed(id string, t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ack, ok := l.early[id]; ok {
		delete(l.early, id)
		l.recordLocked(id, t, ack)
		return
	}
	l.commits[id] = t
}

// acked records the broker's acknowledgements of a published batch.
func (l *latencies) acked(msgs []*outbox.Message, errs []error, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, m := range msgs {
		if errs[i] != nil || l.done[m.MessageID] {
			continue
		}
		if c, ok := l.commits[m.MessageID]; ok {
			delete(l.commits, m.MessageID)
			l.recordLocked(m.MessageID, c, at)
			continue
		}
		l.early[m.MessageID] = at
	}
}

func (l *latencies) recordLocked(id string, commit, ack time.Time) {
	l.done[id] = true
	us := max(ack.Sub(commit).Microseconds(), histMin) // the writer may note its commit a moment late
	us = min(us, histMax)
	_ = l.all.RecordValue(us)
	sec := max(int(commit.Sub(l.start)/time.Second), 0)
	for len(l.seconds) <= sec {
		l.seconds = append(l.seconds, hdrhistogram.New(histMin, histMax, histSigFigs))
	}
	_ = l.seconds[sec].RecordValue(us)
}

// delivered returns how many messages were paired so far.
func (l *latencies) delivered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.done)
}

// quantileMs returns the latency at quantile q (0 to 100) so far, in ms.
func (l *latencies) quantileMs(q float64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return usToMs(l.all.ValueAtQuantile(q))
}

// result summarizes the distribution.
func (l *latencies) result() LatencyResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := LatencyResult{
		Delivered: len(l.done),
		P50Ms:     usToMs(l.all.ValueAtQuantile(50)),
		P90Ms:     usToMs(l.all.ValueAtQuantile(90)),
		P99Ms:     usToMs(l.all.ValueAtQuantile(99)),
		P999Ms:    usToMs(l.all.ValueAtQuantile(99.9)),
		MaxMs:     usToMs(l.all.Max()),
	}
	for i, h := range l.seconds {
		if h.TotalCount() == 0 {
			continue
		}
		r.Series = append(r.Series, LatencyPoint{Second: i, Delivered: int(h.TotalCount()),
			P50Ms: usToMs(h.ValueAtQuantile(50)), P99Ms: usToMs(h.ValueAtQuantile(99)), MaxMs: usToMs(h.Max())})
	}
	return r
}

func usToMs(us int64) float64 { return float64(us) / 1000 }
