package benchcmd

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"os"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	chartW, chartH         = 900, 420
	marginL, marginR       = 70, 180
	marginT, marginB       = 40, 50
	plotW, plotH           = chartW - marginL - marginR, chartH - marginT - marginB
	chartMinMs, chartMaxMs = 0.1, 1e6 // the widest range the log axis spans
)

// line is one series of the chart.
type line struct {
	name   string
	color  string
	dash   string // stroke-dasharray, "" for solid
	points [][2]float64
}

// writeChart draws the latency tests of rep over time, on a log scale, as SVG.
func writeChart(path string, rep *Report) error {
	if len(rep.Latency) == 0 {
		return fmt.Errorf("no latency test to draw")
	}
	var lines []line
	colors := map[string][3]string{relayOutbox: {"#1a7f37", "#0969da", "#8250df"}, relayTextbook: {"#cf222e", "#bc4c00", "#9a6700"}}
	for _, l := range rep.Latency {
		c := colors[l.Relay]
		for i, q := range []struct {
			name string
			dash string
			v    func(LatencyPoint) float64
		}{
			{"p50", "", func(p LatencyPoint) float64 { return p.P50Ms }},
			{"p99", "6 3", func(p LatencyPoint) float64 { return p.P99Ms }},
			{"max", "2 3", func(p LatencyPoint) float64 { return p.MaxMs }},
		} {
			ln := line{name: l.Relay + " " + q.name, color: c[i], dash: q.dash}
			for _, p := range l.Series {
				ln.points = append(ln.points, [2]float64{float64(p.Second) + 0.5, q.v(p)})
			}
			lines = append(lines, ln)
		}
	}
	return os.WriteFile(path, renderChart(rep, lines), 0o644)
}

// renderChart returns the SVG document.
func renderChart(rep *Report, lines []line) []byte {
	xMax, yLo, yHi := 1.0, math.Inf(1), math.Inf(-1)
	for _, ln := range lines {
		for _, p := range ln.points {
			xMax = max(xMax, math.Ceil(p[0]))
			if p[1] > 0 {
				yLo, yHi = min(yLo, p[1]), max(yHi, p[1])
			}
		}
	}
	if math.IsInf(yLo, 1) {
		yLo, yHi = 1, 10
	}
	// Whole decades around the data, within the axis's range.
	dLo := math.Floor(math.Log10(max(yLo, chartMinMs)))
	dHi := math.Ceil(math.Log10(min(max(yHi, yLo*10), chartMaxMs)))
	x := func(s float64) float64 { return marginL + s/xMax*plotW }
	y := func(ms float64) float64 {
		v := math.Log10(min(max(ms, math.Pow(10, dLo)), math.Pow(10, dHi)))
		return marginT + plotH - (v-dLo)/(dHi-dLo)*plotH
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("Commit to broker ack, %s msgs/s offered: %s -> %s", thousands(float64(rep.Latency[0].Rate)), rep.DB, rep.Broker)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14">%s</text>`+"\n", marginL, html.EscapeString(title))
	// Axes and grid.
	for d := dLo; d <= dHi; d++ {
		yy := y(math.Pow(10, d))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", marginL, yy, marginL+plotW, yy)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", marginL-6, yy+4, html.EscapeString(fmtMs(math.Pow(10, d))))
	}
	step := math.Max(1, math.Ceil(xMax/10))
	for s := 0.0; s <= xMax; s += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%gs</text>`+"\n", x(s), marginT+plotH+18, s)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", marginL, marginT, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">seconds since the test started (by commit time)</text>`+"\n",
		marginL+plotW/2, chartH-12)
	// Series and legend.
	for i, ln := range lines {
		if len(ln.points) == 0 {
			continue
		}
		pts := make([]string, len(ln.points))
		for j, p := range ln.points {
			pts[j] = fmt.Sprintf("%.1f,%.1f", x(p[0]), y(p[1]))
		}
		dash := ""
		if ln.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, ln.dash)
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>`+"\n", ln.color, dash, strings.Join(pts, " "))
		ly := marginT + 10 + i*18
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n",
			marginL+plotW+12, ly, marginL+plotW+40, ly, ln.color, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", marginL+plotW+46, ly+4, html.EscapeString(ln.name))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}
