package benchcmd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxkit/outbox"
)

// Presets of [Config.Matrix].
const (
	// MatrixOrdering is the matrix of issue 16's ordering targets: the
	// library's defaults and the tuned shape, with 100 and 5,000
	// aggregates, one relay and three, each with ordering off and on.
	MatrixOrdering = "ordering"
	// MatrixShapes is the library's defaults, then the tuned shape, each
	// with ordering off and on.
	MatrixShapes = "shapes"
)

// presets are the axes of each preset.
var presets = map[string]string{
	MatrixOrdering: "shape=defaults,tuned aggregates=100,5000 relays=1,3 ordering=off,on",
	MatrixShapes:   "shape=defaults,tuned ordering=off,on",
}

// The shapes of the shape axis.
const (
	// ShapeDefaults passes no batch size and no batches in flight: the
	// relay runs with the library's own defaults.
	ShapeDefaults = "defaults"
	// ShapeTuned is batches of 1,000 with 4 in flight, the settings
	// docs/tuning.md recommends for a busy service.
	ShapeTuned = "tuned"
)

// axisNames are the axes a matrix can vary, in the order of the report's columns.
var axisNames = []string{"shape", "batch", "in-flight", "relays", "aggregates", "ordering"}

// Matrix is a parsed [Config.Matrix]: the values of each axis it varies.
type Matrix struct {
	Shapes      []string // ShapeDefaults or ShapeTuned
	BatchSizes  []int
	MaxInFlight []int
	Relays      []int
	Aggregates  []int
	Ordering    []bool
}

// ParseMatrix parses a matrix: a preset (MatrixOrdering, MatrixShapes), or
// axes separated by spaces or semicolons, each a name, "=" and
// comma-separated values: shape=defaults,tuned batch=100,1000
// in-flight=1,4 relays=1,3 aggregates=100,5000 ordering=off,on. An axis
// that is not given takes the run's single value; shape and batch or
// in-flight exclude each other (a shape sets both).
func ParseMatrix(spec string) (Matrix, error) {
	if p, ok := presets[strings.TrimSpace(spec)]; ok {
		spec = p
	}
	var m Matrix
	var errs []error
	seen := map[string]bool{}
	for field := range strings.FieldsFuncSeq(spec, func(r rune) bool { return r == ' ' || r == ';' }) {
		name, vals, ok := strings.Cut(field, "=")
		if !ok || vals == "" {
			errs = append(errs, fmt.Errorf("%q is not an axis=values pair", field))
			continue
		}
		if !slices.Contains(axisNames, name) {
			errs = append(errs, fmt.Errorf("axis %q is unknown (want one of %s, or a preset: %s, %s)", name,
				strings.Join(axisNames, ", "), MatrixOrdering, MatrixShapes))
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("axis %q is given twice", name))
			continue
		}
		seen[name] = true
		for v := range strings.SplitSeq(vals, ",") {
			if err := m.add(name, strings.TrimSpace(v)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	if len(seen) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no axis given"))
	}
	if seen["shape"] && (seen["batch"] || seen["in-flight"]) {
		errs = append(errs, errors.New("shape sets the batch size and batches in flight: give either shape or batch and in-flight"))
	}
	return m, errors.Join(errs...)
}

// add appends one value to an axis.
func (m *Matrix) add(axis, v string) error {
	switch axis {
	case "shape":
		if v != ShapeDefaults && v != ShapeTuned {
			return fmt.Errorf("%q is not %s or %s", v, ShapeDefaults, ShapeTuned)
		}
		m.Shapes = appendNew(m.Shapes, v)
		return nil
	case "ordering":
		on, ok := map[string]bool{"off": false, "on": true, "false": false, "true": true}[v]
		if !ok {
			return fmt.Errorf("%q is not off or on", v)
		}
		m.Ordering = appendNew(m.Ordering, on)
		return nil
	}
	n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
	if err != nil || n < 1 {
		return fmt.Errorf("%q is not a positive number", v)
	}
	dst := map[string]*[]int{"batch": &m.BatchSizes, "in-flight": &m.MaxInFlight, "relays": &m.Relays,
		"aggregates": &m.Aggregates}[axis]
	*dst = appendNew(*dst, n)
	return nil
}

func appendNew[T comparable](s []T, v T) []T {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// cell is one shape of a matrix: the run's Config with the cell's values.
type cell struct {
	cfg   Config
	shape string // "" when the matrix has no shape axis
}

// cells returns the cells of m on base, ordering varying fastest, so that a
// shape's unordered and ordered drains run one after the other.
func (m Matrix) cells(base Config) []cell {
	or := func(vals []int, d int) []int {
		if len(vals) == 0 {
			return []int{d}
		}
		return vals
	}
	shapes := m.Shapes
	if len(shapes) == 0 {
		shapes = []string{""}
	}
	ordering := m.Ordering
	if len(ordering) == 0 {
		ordering = []bool{base.Ordering}
	}
	var out []cell
	for _, shape := range shapes {
		for _, batch := range or(m.BatchSizes, base.BatchSize) {
			for _, inFlight := range or(m.MaxInFlight, base.MaxInFlight) {
				for _, relays := range or(m.Relays, base.Relays) {
					for _, aggs := range or(m.Aggregates, base.Aggregates) {
						for _, on := range ordering {
							c := base
							c.BatchSize, c.MaxInFlight, c.Relays, c.Aggregates, c.Ordering = batch, inFlight, relays, aggs, on
							switch shape {
							case ShapeDefaults:
								c.BatchSize, c.MaxInFlight = outbox.DefaultMaxBatchSize, outbox.DefaultMaxInFlight
								c.librarySizing, c.Adaptive = true, true // the library sizes itself within these bounds
							case ShapeTuned:
								c.BatchSize, c.MaxInFlight = 1000, 4
							}
							out = append(out, cell{cfg: c, shape: shape})
						}
					}
				}
			}
		}
	}
	return out
}

// MatrixRow is one shape of a matrix: its settings, and the drain rates
// measured with ordering off and on (one per round; empty when the matrix
// did not run that side).
type MatrixRow struct {
	Shape       string `json:"shape,omitempty"` // ShapeDefaults, ShapeTuned or "" (no shape axis)
	BatchSize   int    `json:"batch_size"`
	MaxInFlight int    `json:"max_in_flight"`
	Relays      int    `json:"relays"`
	Aggregates  int    `json:"aggregates"`
	// Unordered and Ordered are the msgs/s of each round's drain.
	Unordered []float64 `json:"unordered_msgs_per_sec,omitempty"`
	Ordered   []float64 `json:"ordered_msgs_per_sec,omitempty"`
	// UnorderedMedian and OrderedMedian are the medians of the rounds.
	UnorderedMedian float64 `json:"unordered_median,omitempty"`
	OrderedMedian   float64 `json:"ordered_median,omitempty"`
	// Ratio is OrderedMedian / UnorderedMedian, when both were measured.
	Ratio float64 `json:"ordered_unordered_ratio,omitempty"`
	// RoundRatios are each round's ordered rate over its unordered rate:
	// the two ran one after the other, so on a machine whose load changes
	// these vary less than the rates do.
	RoundRatios []float64 `json:"round_ratios,omitempty"`
	// RoundRatioMedian is the median of RoundRatios: the paired reading,
	// which a drift of the machine's load between rounds does not move
	// the way it can move Ratio.
	RoundRatioMedian float64 `json:"round_ratio_median,omitempty"`
}

// MatrixResult is a matrix run (Config.Matrix).
type MatrixResult struct {
	Spec   string      `json:"spec"`
	Rows   int         `json:"rows"`   // each drain's backlog
	Rounds int         `json:"rounds"` // Config.Count
	Shapes []MatrixRow `json:"shapes"`
}

// rowKey is a cell's row in the report: everything but ordering.
type rowKey struct {
	shape                                      string
	batchSize, maxInFlight, relays, aggregates int
}

func (c cell) key() rowKey {
	return rowKey{c.shape, c.cfg.BatchSize, c.cfg.MaxInFlight, c.cfg.Relays, c.cfg.Aggregates}
}

func (c cell) label() string {
	s := fmt.Sprintf("batch %d, %d in flight", c.cfg.BatchSize, c.cfg.MaxInFlight)
	if c.shape != "" {
		s = c.shape
	}
	return fmt.Sprintf("%s, %d aggs, %s, ordering %s", s, c.cfg.Aggregates, plural(c.cfg.Relays, "relay"),
		onOff(c.cfg.Ordering))
}

// matrixSizing is the Config the run's pool and broker are sized for: the
// most relays, batches in flight and rows per batch of any cell.
func matrixSizing(cfg Config) Config {
	m, _ := ParseMatrix(cfg.Matrix) // validated
	for _, c := range m.cells(cfg) {
		cfg.Relays = max(cfg.Relays, c.cfg.Relays)
		cfg.MaxInFlight = max(cfg.MaxInFlight, c.cfg.MaxInFlight)
		cfg.BatchSize = max(cfg.BatchSize, c.cfg.BatchSize)
	}
	return cfg
}

// matrix drains the backlog once per cell and round, and gathers the rates by shape.
func (r *run) matrix(ctx context.Context) (*MatrixResult, error) {
	m, err := ParseMatrix(r.cfg.Matrix)
	if err != nil {
		return nil, err
	}
	cells := m.cells(r.cfg)
	res := &MatrixResult{Spec: r.cfg.Matrix, Rows: r.cfg.Rows, Rounds: r.cfg.Count}
	index := map[rowKey]int{}
	for _, c := range cells {
		if _, ok := index[c.key()]; !ok {
			index[c.key()] = len(res.Shapes)
			res.Shapes = append(res.Shapes, MatrixRow{Shape: c.shape, BatchSize: c.cfg.BatchSize,
				MaxInFlight: c.cfg.MaxInFlight, Relays: c.cfg.Relays, Aggregates: c.cfg.Aggregates})
		}
	}
	for round := range r.cfg.Count {
		for _, c := range cells {
			cr := &run{cfg: c.cfg, db: r.db, br: r.br, prog: r.prog, name: c.label()}
			if r.cfg.Count > 1 {
				cr.name = fmt.Sprintf("round %d/%d: %s", round+1, r.cfg.Count, cr.name)
			}
			d, err := cr.drain(ctx, relayOutbox)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.label(), err)
			}
			row := &res.Shapes[index[c.key()]]
			if c.cfg.Ordering {
				row.Ordered = append(row.Ordered, d.MsgsPerSec)
			} else {
				row.Unordered = append(row.Unordered, d.MsgsPerSec)
			}
		}
	}
	for i := range res.Shapes {
		row := &res.Shapes[i]
		row.UnorderedMedian, row.OrderedMedian = median(row.Unordered), median(row.Ordered)
		if row.UnorderedMedian > 0 && row.OrderedMedian > 0 {
			row.Ratio = row.OrderedMedian / row.UnorderedMedian
		}
		if len(row.Ordered) == len(row.Unordered) {
			for i, off := range row.Unordered {
				if off > 0 {
					row.RoundRatios = append(row.RoundRatios, row.Ordered[i]/off)
				}
			}
			row.RoundRatioMedian = median(row.RoundRatios)
		}
	}
	return res, nil
}

// median returns the median of vs, 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
