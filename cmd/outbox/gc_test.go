package main

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	// tuneGC changes the process's settings: put them back afterwards.
	oldPercent := debug.SetGCPercent(100)
	oldLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	})
	for _, tc := range []struct {
		name           string
		env            map[string]string
		percent, limit int64
	}{
		{"Defaults", nil, gcPercent, memoryLimit},
		{"GOGCSet", map[string]string{"GOGC": "100"}, -1, memoryLimit},
		{"GOMEMLIMITSet", map[string]string{"GOMEMLIMIT": "1GiB"}, gcPercent, -1},
		{"BothSet", map[string]string{"GOGC": "off", "GOMEMLIMIT": "1GiB"}, -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(math.MaxInt64)
			percent, limit := tuneGC(func(k string) string { return tc.env[k] })
			if int64(percent) != tc.percent || limit != tc.limit {
				t.Fatalf("tuneGC = %d, %d; want %d, %d", percent, limit, tc.percent, tc.limit)
			}
			wantPercent, wantLimit := int64(100), int64(math.MaxInt64)
			if tc.percent > 0 {
				wantPercent = tc.percent
			}
			if tc.limit > 0 {
				wantLimit = tc.limit
			}
			if got := debug.SetGCPercent(100); int64(got) != wantPercent {
				t.Errorf("GC percent is %d, want %d", got, wantPercent)
			}
			if got := debug.SetMemoryLimit(-1); got != wantLimit {
				t.Errorf("memory limit is %d, want %d", got, wantLimit)
			}
		})
	}
}
