package bench

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/benchcmd"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// relayRows is the backlog of BenchmarkRelayDrain: OUTBOX_BENCH_ROWS, or 100,000.
func relayRows() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_ROWS")); err == nil && n > 0 {
		return n
	}
	return 100_000
}

// BenchmarkRelayDrain drains a preloaded backlog from PostgreSQL to NATS
// JetStream with the settings that make the relay fast, one at a time, so
// that their effects can be compared within one run (the machine is shared;
// compare ratios, not absolute figures, across runs). Each iteration is one
// `outbox bench --test drain` run; reported: msgs/s, the process's CPU seconds
// and peak resident memory while draining.
//
//	go test -run '^$' -bench RelayDrain -benchtime 1x ./bench
//	OUTBOX_BENCH_ROWS=20000 go test -run '^$' -bench 'RelayDrain/.*/lease' -benchtime 3x ./bench
func BenchmarkRelayDrain(b *testing.B) {
	shapes := []struct {
		name string
		cfg  benchcmd.Config
	}{
		{"defaults", benchcmd.Config{BatchSize: 1000, MaxInFlight: 4, Adaptive: true}},
		{"batch100_inflight1", benchcmd.Config{BatchSize: 100, MaxInFlight: 1}},
		{"batch1000", benchcmd.Config{BatchSize: 1000, MaxInFlight: 1}},
		{"batch1000_inflight4", benchcmd.Config{BatchSize: 1000, MaxInFlight: 4}},
		{"batch1000_inflight4_async", benchcmd.Config{BatchSize: 1000, MaxInFlight: 4, AsyncCommit: true}},
		{"batch1000_inflight4_lease", benchcmd.Config{BatchSize: 1000, MaxInFlight: 4, BatchLease: true}},
		{"batch1000_inflight4_lease_async", benchcmd.Config{BatchSize: 1000, MaxInFlight: 4, BatchLease: true, AsyncCommit: true}},
		{"batch1000_inflight4_lease_2relays", benchcmd.Config{BatchSize: 1000, MaxInFlight: 4, BatchLease: true, Relays: 2}},
		{"batch1000_inflight4_held", benchcmd.Config{BatchSize: 1000, MaxInFlight: 4, HeldClaims: true}},
		{"batch1000_inflight4_held_2relays", benchcmd.Config{BatchSize: 1000, MaxInFlight: 4, HeldClaims: true, Relays: 2}},
	}
	for _, del := range []bool{false, true} {
		for _, sh := range shapes {
			name := "keep/" + sh.name
			if del {
				name = "delete/" + sh.name
			}
			b.Run(name, func(b *testing.B) {
				cfg := sh.cfg
				cfg.DeleteSent = del
				cfg.Rows = relayRows()
				cfg.Tests = []string{benchcmd.TestDrain}
				cfg.SkipBaseline = true
				var rate, cpu, rss float64
				for range b.N {
					rep := runOnce(b, cfg)
					d := rep.Drain[0]
					rate += d.MsgsPerSec
					cpu += d.CPUSeconds
					rss = max(rss, d.PeakRSSMB)
				}
				b.ReportMetric(rate/float64(b.N), "msgs/s")
				b.ReportMetric(cpu/float64(b.N), "cpu-s")
				b.ReportMetric(rss, "peak-rss-MB")
			})
		}
	}
}

// BenchmarkRelayVsReference drains the backlog with the fastest relay
// settings (held claims, batch 1,000, 4 in flight) and then, in the same
// iteration, with the reference loop: one statement per batch that deletes
// the rows (or marks them sent) and returns them, then the batch published
// at once, one batch at a time (benchcmd.Config.Reference). The reference
// loop does the least database work per message any relay can, so it is a
// yardstick of the machine: the ratio compares across machines where the
// rates do not. Reported: both rates and the relay's as a percentage of the
// reference's.
//
//	go test -run '^$' -bench RelayVsReference -benchtime 1x -count 5 ./bench
func BenchmarkRelayVsReference(b *testing.B) {
	for _, del := range []bool{false, true} {
		for _, relays := range []int{1, 2} {
			name := fmt.Sprintf("%s/relays=%d", map[bool]string{false: "keep", true: "delete"}[del], relays)
			b.Run(name, func(b *testing.B) {
				cfg := benchcmd.Config{BatchSize: 1000, MaxInFlight: 4, HeldClaims: true, Relays: relays,
					DeleteSent: del, Reference: true, Rows: relayRows(), Tests: []string{benchcmd.TestDrain},
					SkipBaseline: true}
				var ours, ref float64
				for range b.N {
					rep := runOnce(b, cfg)
					ours += rep.Drain[0].MsgsPerSec
					ref += rep.Drain[1].MsgsPerSec
				}
				b.ReportMetric(ours/float64(b.N), "msgs/s")
				b.ReportMetric(ref/float64(b.N), "ref-msgs/s")
				b.ReportMetric(100*ours/ref, "%-of-ref")
			})
		}
	}
}

// BenchmarkRelayLatency offers 1,000 one-message transactions a second for
// 10 s on PostgreSQL and measures each message's time from commit to the
// JetStream acknowledgement: with the library's default relay settings (the
// relay sizes itself) and with batch 100 and one batch in flight (the
// defaults before), each woken by LISTEN/NOTIFY and by adaptive polling
// alone (no NOTIFY, as on MySQL and SQLite), and with the fast ones.
//
//	go test -run '^$' -bench RelayLatency -benchtime 1x ./bench
func BenchmarkRelayLatency(b *testing.B) {
	for _, sh := range []struct {
		name string
		cfg  benchcmd.Config
	}{
		{"defaults", benchcmd.Config{BatchSize: 1000, MaxInFlight: 4, Adaptive: true}},
		{"defaults_polling", benchcmd.Config{BatchSize: 1000, MaxInFlight: 4, Adaptive: true, NoNotify: true}},
		{"batch100_inflight1", benchcmd.Config{BatchSize: 100, MaxInFlight: 1}},
		{"batch100_inflight1_polling", benchcmd.Config{BatchSize: 100, MaxInFlight: 1, NoNotify: true}},
		{"inflight4_lease_async", benchcmd.Config{BatchSize: 1000, MaxInFlight: 4, BatchLease: true, AsyncCommit: true}},
		{"inflight4_lease_async_polling", benchcmd.Config{BatchSize: 1000, MaxInFlight: 4, BatchLease: true, AsyncCommit: true,
			NoNotify: true}},
	} {
		b.Run(fmt.Sprintf("rate=1000/%s", sh.name), func(b *testing.B) {
			cfg := sh.cfg
			cfg.Tests = []string{benchcmd.TestLatency}
			cfg.Rate, cfg.Duration, cfg.SkipBaseline = 1000, 10*time.Second, true
			var p50, p99, p999, offered float64
			for range b.N {
				rep := runOnce(b, cfg)
				l := rep.Latency[0]
				p50, p99, p999 = p50+l.P50Ms, p99+l.P99Ms, p999+l.P999Ms
				offered += l.OfferedRate
			}
			n := float64(b.N)
			b.ReportMetric(p50/n, "p50-ms")
			b.ReportMetric(p99/n, "p99-ms")
			b.ReportMetric(p999/n, "p99.9-ms")
			b.ReportMetric(offered/n, "offered/s")
		})
	}
}

// runOnce runs cfg once on a schema of its own on the test PostgreSQL and
// on the test NATS server; only the run itself is timed.
func runOnce(b *testing.B, cfg benchcmd.Config) *benchcmd.Report {
	b.Helper()
	b.StopTimer()
	_, _, cfg.DB = testsvc.PostgresSchema(b)
	cfg.Broker = testsvc.NATSURL(b)
	b.StartTimer()
	rep, err := benchcmd.Run(b.Context(), cfg, nopWriter{})
	if err != nil {
		b.Fatal(err)
	}
	return rep
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
