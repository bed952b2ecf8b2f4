package benchcmd

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// usage is what the process used during one test.
type usage struct {
	CPUSeconds float64 `json:"cpu_seconds"`  // user + system CPU time of the whole process
	PeakRSSMB  float64 `json:"peak_rss_mb"`  // peak resident memory of the whole process (0 where unknown)
	PeakHeapMB float64 `json:"peak_heap_mb"` // peak Go heap in use, sampled every 10 ms
}

// meter measures the process's CPU time and peak memory from its start to stop.
type meter struct {
	cpu0     time.Duration
	peakHeap atomic.Uint64
	done     chan struct{}
	wg       sync.WaitGroup
}

const heapMetric = "/memory/classes/heap/objects:bytes"

// startMeter resets the peak RSS (where the system allows) and starts sampling the heap.
func startMeter() *meter {
	resetPeakRSS()
	m := &meter{cpu0: cpuTime(), done: make(chan struct{})}
	m.wg.Go(func() {
		sample := []metrics.Sample{{Name: heapMetric}}
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 {
				if v := sample[0].Value.Uint64(); v > m.peakHeap.Load() {
					m.peakHeap.Store(v)
				}
			}
			select {
			case <-m.done:
				return
			case <-t.C:
			}
		}
	})
	return m
}

// stop ends the measurement.
func (m *meter) stop() usage {
	close(m.done)
	m.wg.Wait()
	return usage{
		CPUSeconds: (cpuTime() - m.cpu0).Seconds(),
		PeakRSSMB:  float64(peakRSS()) / (1 << 20),
		PeakHeapMB: float64(m.peakHeap.Load()) / (1 << 20),
	}
}

// profile starts a CPU profile for the test named test of the relay when
// the run asks for one (Config.CPUProfile) and the relay is ours, and
// returns what stops it.
func (r *run) profile(test, relay string) (stop func() error, err error) {
	if r.cfg.CPUProfile == "" || relay != relayOutbox {
		return func() error { return nil }, nil
	}
	name := r.cfg.CPUProfile
	if len(r.cfg.Tests) > 1 {
		ext := filepath.Ext(name)
		name = name[:len(name)-len(ext)] + "." + test + ext
	}
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
