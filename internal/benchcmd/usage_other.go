//go:build !linux

package benchcmd

import "time"

// cpuTime is unknown outside Linux: the report shows 0.
func cpuTime() time.Duration { return 0 }

func resetPeakRSS() {}

// peakRSS is unknown outside Linux: the report shows 0.
func peakRSS() uint64 { return 0 }
