package main

import (
	"runtime/debug"
)

// The relay's live heap is small (the batches in flight, a few MB), so with
// Go's default GOGC=100 a busy relay collects garbage very often: most of
// what it allocates (rows, broker messages, acknowledgements) dies within a
// batch. Here a collection every 4× the live heap cut the relay's CPU in a
// 100,000-row drain by about 15% and raised its peak RSS from about 48 to
// 64-74 MB. A soft memory limit makes the collector work harder before the
// heap grows past it, whatever the configuration. GOGC and GOMEMLIMIT, when
// set, win.
const (
	gcPercent   = 400
	memoryLimit = 256 << 20 // bytes
)

// tuneGC applies the command's garbage collector defaults where the
// environment (read through getenv) does not set its own, and returns what
// it set: the GC percent and the memory limit, each -1 when left alone.
func tuneGC(getenv func(string) string) (percent int, limit int64) {
	percent, limit = -1, -1
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
		percent = gcPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
		limit = memoryLimit
	}
	return percent, limit
}
