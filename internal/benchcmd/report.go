package benchcmd

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxkit/outbox/internal/termsafe"
)

// writeReport writes rep to out: JSON, or the summary tables.
func writeReport(out io.Writer, rep *Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	var b strings.Builder
	writeHeader(&b, rep)
	if rep.Matrix != nil {
		writeMatrix(&b, rep.Matrix)
	}
	if len(rep.Drain) > 0 {
		writeDrains(&b, rep)
	}
	if len(rep.Latency) > 0 {
		writeLatencies(&b, rep)
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// writeHeader writes the report's first two lines: the database and the
// broker, then the machine and the outbox relay's settings.
func writeHeader(b *strings.Builder, rep *Report) {
	s := rep.Settings
	fmt.Fprintf(b, "outbox bench: %s -> %s\n", termsafe.String(rep.DB), termsafe.String(rep.Broker))
	sizes := fmt.Sprintf("batch %d, %d in flight", s.BatchSize, s.MaxInFlight)
	if s.Adaptive {
		sizes = fmt.Sprintf("batch up to %d, up to %d in flight (adaptive)", s.BatchSize, s.MaxInFlight)
	}
	if rep.Matrix != nil {
		fmt.Fprintf(b, "%s %s, %d CPUs. outbox relay: settings by shape below, %s sent rows",
			rep.GoVersion, rep.OS, rep.CPUs, map[bool]string{false: "keep", true: "delete"}[s.DeleteSent])
	} else {
		fmt.Fprintf(b, "%s %s, %d CPUs. outbox relay: %s, %s, %s sent rows, ordering %s, %s aggregates",
			rep.GoVersion, rep.OS, rep.CPUs, plural(s.Relays, "relay"), sizes,
			map[bool]string{false: "keep", true: "delete"}[s.DeleteSent], onOff(s.Ordering), thousands(float64(s.Aggregates)))
	}
	switch {
	case s.Notify && s.NotifyIntervalMs > 0:
		fmt.Fprintf(b, ", LISTEN/NOTIFY (a write notifies at most every %gms)", s.NotifyIntervalMs)
	case s.Notify:
		b.WriteString(", LISTEN/NOTIFY (every write notifies)")
	}
	if s.AsyncCommit {
		b.WriteString(", async commit")
	}
	if s.BatchLease {
		b.WriteString(", batch leases")
	}
	if s.HeldClaims {
		b.WriteString(", held claims")
	}
	if s.NoSlots {
		b.WriteString(", no relay slots")
	}
	if s.Source == SourceCDC {
		b.WriteString(", source cdc (the write-ahead log)")
	}
	if s.WriterDeletes {
		b.WriteString(", writers delete their rows")
	}
	if s.ContractIndexes {
		b.WriteString(", only the contract's indexes")
	}
	if s.SentRows > 0 {
		b.WriteString(", " + thousands(float64(s.SentRows)) + " sent rows kept ahead")
	}
	if s.Payload == PayloadBinary {
		b.WriteString(", binary payloads (" + ContentTypeBinary + ")")
	}
	b.WriteString("\n")
}

// writeDrains writes the table of the drain tests and the drain ratios.
func writeDrains(b *strings.Builder, rep *Report) {
	b.WriteString("\nDrain: a preloaded backlog published (the clock stops at the last broker acknowledgement)\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "relay\trows\tdelivered\ttime\tmsgs/s\tCPU s\tpeak RSS\tpeak heap\t")
	for _, d := range rep.Drain {
		note := ""
		if !d.Complete {
			note = "  (time up)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\n", d.Relay, thousands(float64(d.Rows)),
			thousands(float64(d.Delivered)), fmtSeconds(d.Seconds), thousands(d.MsgsPerSec), d.CPUSeconds,
			fmtMB(d.PeakRSSMB), fmtMB(d.PeakHeapMB), note)
	}
	tw.Flush()
	if rep.DrainRatio > 0 {
		fmt.Fprintf(b, "outbox relay drains %sx as fast as the textbook relay\n", ratio(rep.DrainRatio))
	}
	if rep.ReferenceRatio > 0 {
		fmt.Fprintf(b, "outbox relay drains %sx as fast as the reference loop (one statement takes a batch, then it is published; unsafe as a relay)\n",
			ratio(rep.ReferenceRatio))
	}
}

// writeLatencies writes the table of the latency tests, their failed
// writes and the latency ratio.
func writeLatencies(b *strings.Builder, rep *Report) {
	l0 := rep.Latency[0]
	fmt.Fprintf(b, "\nLatency: %s msgs/s offered for %s after %s of warm-up, one message per transaction (%s at once), commit to broker acknowledgement\n",
		thousands(float64(l0.Rate)), fmtSeconds(math.Round(l0.Seconds)), fmtSeconds(l0.WarmupSeconds),
		plural(rep.Settings.Writers, "writer"))
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "relay\toffered\tdelivered\tp50\tp90\tp99\tp99.9\tmax\tCPU s\tpeak RSS\t")
	for _, l := range rep.Latency {
		note := ""
		if l.OfferedRate < 0.95*float64(l.Rate) {
			note = fmt.Sprintf("  (writers reached %s/s)", thousands(l.OfferedRate))
		}
		if l.WarmupSeconds != l0.WarmupSeconds {
			note += fmt.Sprintf("  (warm-up %s)", fmtSeconds(l.WarmupSeconds))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\n", l.Relay, thousands(float64(l.Offered)),
			thousands(float64(l.Delivered)), fmtMs(l.P50Ms), fmtMs(l.P90Ms), fmtMs(l.P99Ms), fmtMs(l.P999Ms),
			fmtMs(l.MaxMs), l.CPUSeconds, fmtMB(l.PeakRSSMB), note)
	}
	tw.Flush()
	for _, l := range rep.Latency {
		if l.WriteErrors > 0 {
			fmt.Fprintf(b, "%s: %s of %s write transactions failed while it ran, the first with: %s\n", l.Relay,
				thousands(float64(l.WriteErrors)), thousands(float64(l.WriteErrors+l.Offered)), termsafe.String(l.FirstWriteError))
		}
	}
	if rep.LatencyRatio > 0 {
		fmt.Fprintf(b, "outbox relay p99 is %sx lower than the textbook relay's\n", ratio(rep.LatencyRatio))
	}
}

// writeMatrix writes a matrix's table: a row per shape, its unordered and
// ordered drain rates and their ratio (of the medians; over several rounds
// also the range and median of each round's own ratio).
func writeMatrix(b *strings.Builder, m *MatrixResult) {
	rounds := "once"
	if m.Rounds > 1 {
		rounds = fmt.Sprintf("%d times, round after round; medians (lowest-highest)", m.Rounds)
	}
	fmt.Fprintf(b, "\nMatrix %q: each shape drains %s rows, ordering off then on, %s; msgs/s\n",
		m.Spec, thousands(float64(m.Rows)), rounds)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\tbatch\tin flight\trelays\taggregates\tunordered\tordered\tordered/unordered\t")
	rate := func(runs []float64, med float64) string {
		switch {
		case len(runs) == 0:
			return "-"
		case len(runs) == 1:
			return thousands(med)
		}
		return fmt.Sprintf("%s (%s-%s)", thousands(med), thousands(slices.Min(runs)), thousands(slices.Max(runs)))
	}
	for _, r := range m.Shapes {
		shape, ratio := r.Shape, "-"
		if shape == "" {
			shape = "-"
		}
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		if len(r.RoundRatios) > 1 {
			ratio += fmt.Sprintf(" (rounds %.2f-%.2f, median %.2f)", slices.Min(r.RoundRatios), slices.Max(r.RoundRatios),
				r.RoundRatioMedian)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n", shape, r.BatchSize, r.MaxInFlight, r.Relays,
			thousands(float64(r.Aggregates)), rate(r.Unordered, r.UnorderedMedian), rate(r.Ordered, r.OrderedMedian), ratio)
	}
	tw.Flush()
}

func onOff(on bool) string { return map[bool]string{false: "off", true: "on"}[on] }

// thousands formats v rounded to an integer with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtMs formats a latency in ms with two or three significant digits.
func fmtMs(ms float64) string {
	switch {
	case ms <= 0:
		return "-"
	case ms < 10:
		return fmt.Sprintf("%.2fms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0fms", ms)
	}
	return fmtSeconds(ms / 1000)
}

func fmtSeconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond * 10).String()
}

func fmtMB(mb float64) string {
	if mb <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MB", mb)
}

func ratio(r float64) string {
	if r >= 10 {
		return thousands(r)
	}
	return fmt.Sprintf("%.1f", r)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
