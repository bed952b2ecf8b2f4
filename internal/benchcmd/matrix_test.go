package benchcmd

import (
	"bytes"
	"encoding/json"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
)

func TestParseMatrix(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		spec string
		want Matrix
		err  []string // substrings; nil means valid
	}{
		{"PresetOrdering", "ordering", Matrix{Shapes: []string{"defaults", "tuned"}, Aggregates: []int{100, 5000},
			Relays: []int{1, 3}, Ordering: []bool{false, true}}, nil},
		{"PresetShapes", " shapes ", Matrix{Shapes: []string{"defaults", "tuned"}, Ordering: []bool{false, true}}, nil},
		{"Axes", "batch=100,1_000;in-flight=1,4 relays=2 aggregates=7 ordering=on,off,on",
			Matrix{BatchSizes: []int{100, 1000}, MaxInFlight: []int{1, 4}, Relays: []int{2}, Aggregates: []int{7},
				Ordering: []bool{true, false}}, nil},
		{"Empty", " ", Matrix{}, []string{"no axis given"}},
		{"UnknownAxis", "batch=1 colour=red", Matrix{}, []string{`axis "colour" is unknown`}},
		{"NoValues", "batch=", Matrix{}, []string{`"batch=" is not an axis=values pair`}},
		{"Twice", "relays=1 relays=3", Matrix{}, []string{`axis "relays" is given twice`}},
		{"BadValues", "batch=0,x ordering=maybe shape=fast", Matrix{},
			[]string{`batch: "0" is not a positive number`, `batch: "x"`, `ordering: "maybe" is not off or on`,
				`shape: "fast" is not defaults or tuned`}},
		{"ShapeAndBatch", "shape=tuned batch=100", Matrix{}, []string{"give either shape or batch and in-flight"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := ParseMatrix(tc.spec)
			if tc.err == nil {
				require.NoError(t, err)
				require.Equal(t, tc.want, m)
				return
			}
			require.Error(t, err)
			for _, w := range tc.err {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestMatrixCells: ordering varies fastest, so that a shape's unordered and
// ordered drains run one after the other; the defaults shape passes the
// library's own sizing, the tuned shape batches of 1,000 with 4 in flight;
// an axis not given keeps the run's value.
func TestMatrixCells(t *testing.T) {
	t.Parallel()
	m, err := ParseMatrix("shape=defaults,tuned aggregates=100,5000 ordering=off,on")
	require.NoError(t, err)
	base := Config{Relays: 2, BatchSize: 500, MaxInFlight: 2, Aggregates: 9}
	cells := m.cells(base)
	require.Len(t, cells, 8)
	var got []string
	for _, c := range cells {
		got = append(got, c.label())
		require.Equal(t, 2, c.cfg.Relays)
		require.Equal(t, c.shape == ShapeDefaults, c.cfg.librarySizing)
	}
	require.Equal(t, []string{
		"defaults, 100 aggs, 2 relays, ordering off", "defaults, 100 aggs, 2 relays, ordering on",
		"defaults, 5000 aggs, 2 relays, ordering off", "defaults, 5000 aggs, 2 relays, ordering on",
		"tuned, 100 aggs, 2 relays, ordering off", "tuned, 100 aggs, 2 relays, ordering on",
		"tuned, 5000 aggs, 2 relays, ordering off", "tuned, 5000 aggs, 2 relays, ordering on",
	}, got)
	require.Equal(t, []int{outbox.DefaultMaxBatchSize, outbox.DefaultMaxInFlight}, []int{cells[0].cfg.BatchSize, cells[0].cfg.MaxInFlight})
	require.Equal(t, []int{1000, 4}, []int{cells[4].cfg.BatchSize, cells[4].cfg.MaxInFlight})

	m, err = ParseMatrix("relays=1,3")
	require.NoError(t, err)
	cells = m.cells(Config{Ordering: true, BatchSize: 500, MaxInFlight: 2, Aggregates: 9, Relays: 1})
	require.Len(t, cells, 2)
	require.Equal(t, "batch 500, 2 in flight, 9 aggs, 3 relays, ordering on", cells[1].label())
	require.Equal(t, Config{Relays: 3, MaxInFlight: 2, BatchSize: 500, Matrix: "relays=1,3"},
		matrixSizing(Config{Relays: 1, MaxInFlight: 2, BatchSize: 500, Matrix: "relays=1,3"}))
}

// serverDBs give a test a database of its own on each server: its DSN.
var serverDBs = map[string]func(t *testing.T) string{
	"postgres": func(t *testing.T) string { _, _, dsn := testsvc.PostgresSchema(t); return dsn },
	"mysql":    func(t *testing.T) string { _, dsn := testsvc.MySQLDatabase(t); return dsn },
}

// TestOrderingAndAggregates checks that the run's settings reach the relay
// and the backlog, on the real PostgreSQL and MariaDB: with ordering on, a
// published batch never holds two messages of one aggregate (only heads are
// claimed), with it off the batches do; the backlog spreads over exactly
// Aggregates aggregates; the defaults shape passes the library's batch size.
func TestOrderingAndAggregates(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		ordering      bool
		librarySizing bool
	}{{"Unordered", false, false}, {"Ordered", true, false}, {"LibraryDefaults", false, true}}
	for db, newDSN := range serverDBs {
		for _, tc := range cases {
			t.Run(db+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				const rows, aggs = 600, 7
				cfg := Config{DB: newDSN(t), Rows: rows, Aggregates: aggs, Ordering: tc.ordering, BatchSize: 300,
					MaxInFlight: 2, librarySizing: tc.librarySizing}.withDefaults()
				dir := t.TempDir()
				name := "order_" + randomHex(4)
				d, err := openDatabase(t.Context(), cfg, dir, name)
				require.NoError(t, err)
				t.Cleanup(d.close)
				br, err := openBroker(t.Context(), "", dir, name, 4096)
				require.NoError(t, err)
				t.Cleanup(br.close)
				r := &run{cfg: cfg, db: d, br: br, prog: newProgress(nil)}
				require.NoError(t, r.preload(t.Context(), rows))

				var mu sync.Mutex
				var largest, repeats int
				smallest := rows
				seen := map[string]bool{}
				onAck := func(msgs []*outbox.Message, _ []error, _ time.Time) {
					mu.Lock()
					defer mu.Unlock()
					largest, smallest = max(largest, len(msgs)), min(smallest, len(msgs))
					inBatch := map[string]bool{}
					for _, m := range msgs {
						if inBatch[m.AggregateID] {
							repeats++
						}
						inBatch[m.AggregateID], seen[m.AggregateID] = true, true
					}
				}
				runners, rec, err := r.relays(relayOutbox, onAck)
				require.NoError(t, err)
				stop := start(t.Context(), runners)
				testsvc.Eventually(t, time.Minute, func() bool { return rec.confirmed.Load() >= rows }, "drained")
				require.NoError(t, stop())
				require.NoError(t, r.checkDelivered(t.Context(), rows))

				mu.Lock()
				defer mu.Unlock()
				require.Equal(t, aggs, len(seen), "aggregates in the backlog")
				if tc.ordering {
					require.Zero(t, repeats, "an ordered batch held two messages of one aggregate")
					require.LessOrEqual(t, largest, aggs)
				} else {
					require.Positive(t, repeats)
				}
				switch {
				case tc.ordering: // at most one message per aggregate: the size says nothing
				case tc.librarySizing: // the relay sizes itself, starting from its smallest batch
					require.LessOrEqual(t, smallest, outbox.DefaultMinBatchSize)
				default:
					require.Equal(t, cfg.BatchSize, largest, "the batch size reached the relay")
				}
			})
		}
	}
}

// TestRunMatrix runs a small matrix on the real PostgreSQL and MariaDB, with
// the embedded NATS server, twice over: every cell drains the whole backlog
// (checked by checkDelivered), the report has a row per shape with both
// sides, their medians and the ratio, as a table and as JSON.
func TestRunMatrix(t *testing.T) {
	t.Parallel()
	for db, newDSN := range serverDBs {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var out, prog bytes.Buffer
			rep, err := Run(t.Context(), Config{DB: newDSN(t), Rows: 300, Matrix: "shape=defaults,tuned relays=1,2 ordering=off,on",
				Aggregates: 20, Count: 2, Progress: &prog}, &out)
			require.NoError(t, err)
			require.Empty(t, rep.Drain, "a matrix runs no other test")
			require.Empty(t, rep.Latency)
			m := rep.Matrix
			require.NotNil(t, m)
			require.Equal(t, 300, m.Rows)
			require.Equal(t, 2, m.Rounds)
			require.Len(t, m.Shapes, 4)
			for i, want := range []MatrixRow{
				{Shape: ShapeDefaults, BatchSize: outbox.DefaultMaxBatchSize, MaxInFlight: outbox.DefaultMaxInFlight, Relays: 1, Aggregates: 20},
				{Shape: ShapeDefaults, BatchSize: outbox.DefaultMaxBatchSize, MaxInFlight: outbox.DefaultMaxInFlight, Relays: 2, Aggregates: 20},
				{Shape: ShapeTuned, BatchSize: 1000, MaxInFlight: 4, Relays: 1, Aggregates: 20},
				{Shape: ShapeTuned, BatchSize: 1000, MaxInFlight: 4, Relays: 2, Aggregates: 20},
			} {
				row := m.Shapes[i]
				require.Equal(t, want, MatrixRow{Shape: row.Shape, BatchSize: row.BatchSize, MaxInFlight: row.MaxInFlight,
					Relays: row.Relays, Aggregates: row.Aggregates})
				require.Len(t, row.Unordered, 2)
				require.Len(t, row.Ordered, 2)
				require.InDelta(t, (row.Unordered[0]+row.Unordered[1])/2, row.UnorderedMedian, 1e-9)
				require.InDelta(t, row.OrderedMedian/row.UnorderedMedian, row.Ratio, 1e-9)
				require.Len(t, row.RoundRatios, 2)
				require.InDelta(t, row.Ordered[1]/row.Unordered[1], row.RoundRatios[1], 1e-9)
				require.InDelta(t, (row.RoundRatios[0]+row.RoundRatios[1])/2, row.RoundRatioMedian, 1e-9)
			}
			text := out.String()
			require.Contains(t, text, `Matrix "shape=defaults,tuned relays=1,2 ordering=off,on": each shape drains 300 rows`)
			require.Contains(t, text, "ordered/unordered")
			require.Contains(t, text, "settings by shape below")
			require.Contains(t, prog.String(), "round 2/2: tuned, 20 aggs, 2 relays, ordering on")

			var back Report
			var js bytes.Buffer
			require.NoError(t, writeReport(&js, rep, true))
			require.NoError(t, json.Unmarshal(js.Bytes(), &back))
			require.Equal(t, rep.Matrix, back.Matrix)
		})
	}
}

// TestWriteMatrix checks the table: medians with their range over rounds,
// "-" for a side not measured, the ratio to two decimals.
func TestWriteMatrix(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	writeMatrix(&b, &MatrixResult{Spec: "ordering", Rows: 100_000, Rounds: 3, Shapes: []MatrixRow{
		{Shape: ShapeDefaults, BatchSize: 100, MaxInFlight: 1, Relays: 1, Aggregates: 5000,
			Unordered: []float64{11_000, 12_000, 13_000}, Ordered: []float64{2_000, 2_600, 3_000},
			UnorderedMedian: 12_000, OrderedMedian: 2_600, Ratio: 2600.0 / 12000, RoundRatios: []float64{0.18, 0.21, 0.23}, RoundRatioMedian: 0.21},
		{BatchSize: 1000, MaxInFlight: 4, Relays: 3, Aggregates: 100, Unordered: []float64{27_000}, UnorderedMedian: 27_000},
	}})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Equal(t, `Matrix "ordering": each shape drains 100,000 rows, ordering off then on, 3 times, round after round; medians (lowest-highest); msgs/s`, lines[0])
	require.Len(t, lines, 4)
	require.Equal(t, []string{"defaults", "100", "1", "1", "5,000", "12,000", "(11,000-13,000)", "2,600", "(2,000-3,000)", "0.22", "(rounds", "0.18-0.23,", "median", "0.21)"},
		strings.Fields(lines[2]))
	require.Equal(t, []string{"-", "1000", "4", "3", "100", "27,000", "-", "-"}, strings.Fields(lines[3]))
}

// TestContractIndexesAndSentRows runs drains on a table as a team makes it
// from the contract, on every database: only the contract's indexes (the
// store misses Migrate's, and says so), with sent rows kept ahead of the
// backlog over the same aggregates. The kept rows are never published and
// stay through the reset between tests; the next test's backlog drains too.
func TestContractIndexesAndSentRows(t *testing.T) {
	t.Parallel()
	dbs := map[string]func(t *testing.T) string{"sqlite": func(t *testing.T) string { return "" }}
	maps.Copy(dbs, serverDBs)
	for db, newDSN := range dbs {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			const rows, sent = 400, 300
			cfg := Config{DB: newDSN(t), Rows: rows, Aggregates: 7, Ordering: true, BatchSize: 100, MaxInFlight: 2,
				ContractIndexes: true, SentRows: sent}.withDefaults()
			require.NoError(t, cfg.validate())
			dir := t.TempDir()
			name := "contract_" + randomHex(4)
			d, err := openDatabase(t.Context(), cfg, dir, name)
			require.NoError(t, err)
			t.Cleanup(d.close)
			missing, err := d.store.(outbox.IndexChecker).MissingIndexes(t.Context())
			require.NoError(t, err)
			require.Len(t, missing, 2, "Migrate's claim indexes are gone")
			br, err := openBroker(t.Context(), "", dir, name, 4096)
			require.NoError(t, err)
			t.Cleanup(br.close)
			r := &run{cfg: cfg, db: d, br: br, prog: newProgress(nil)}
			require.NoError(t, r.keepSent(t.Context()))

			count := func(where string) (n int) {
				require.NoError(t, d.sqlDB.QueryRowContext(t.Context(), "SELECT count(*) FROM "+d.table+" WHERE "+where).Scan(&n))
				return n
			}
			require.Equal(t, sent, count("status = 1"))
			require.Zero(t, count("status <> 1"))
			for range 2 { // a test, then the next one after a reset
				res, err := r.drain(t.Context(), relayOutbox) // checkDelivered: the stream holds rows messages, none of the kept
				require.NoError(t, err)
				require.True(t, res.Complete)
				require.Equal(t, rows, res.Delivered)
				require.Equal(t, sent+rows, count("status = 1"))
			}
			require.NoError(t, r.reset(t.Context()))
			require.Equal(t, sent, count("1 = 1"), "the kept rows outlive a reset")
		})
	}
}
