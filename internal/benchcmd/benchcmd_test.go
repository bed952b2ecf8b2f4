package benchcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// TestRunEmbedded runs both tests and the baseline on the embedded defaults
// (SQLite in a temporary folder, NATS in the process) with small numbers.
func TestRunEmbedded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	chart := filepath.Join(dir, "latency.svg")
	var out, prog bytes.Buffer
	// Small batches: under the race detector, SQLite and the embedded server are slow.
	// A preload in transactions of 300 rows ends with a short one.
	rep, err := Run(t.Context(), Config{Rows: 1000, TxRows: 300, Rate: 50, Duration: time.Second, BaselineTime: time.Second,
		BatchSize: 250, MaxInFlight: 2, Chart: chart, CPUProfile: filepath.Join(dir, "cpu.pprof"), Progress: &prog}, &out)
	require.NoError(t, err)
	for _, test := range []string{TestDrain, TestLatency} {
		// A profile of each test of the outbox relay: pprof's gzipped protocol buffer.
		b, err := os.ReadFile(filepath.Join(dir, "cpu."+test+".pprof"))
		require.NoError(t, err)
		require.Greater(t, len(b), 2)
		require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "gzip")
	}
	_, err = os.Stat(filepath.Join(dir, "cpu.pprof"))
	require.ErrorIs(t, err, os.ErrNotExist, "two tests: each its own file")

	require.Len(t, rep.Drain, 2)
	ours, base := rep.Drain[0], rep.Drain[1]
	require.Equal(t, relayOutbox, ours.Relay)
	require.True(t, ours.Complete)
	require.Equal(t, 1000, ours.Delivered)
	require.Positive(t, ours.MsgsPerSec)
	require.Positive(t, ours.CPUSeconds)
	require.Positive(t, ours.PeakHeapMB)
	require.Equal(t, relayTextbook, base.Relay)
	require.Positive(t, base.Delivered)
	// One cycle a second of at most 100 rows, and the first one at once.
	require.LessOrEqual(t, base.Delivered, 100*(int(base.Seconds)+1))
	require.InDelta(t, ours.MsgsPerSec/base.MsgsPerSec, rep.DrainRatio, 1e-9)
	require.Greater(t, rep.DrainRatio, 1.0)

	require.Len(t, rep.Latency, 2)
	l := rep.Latency[0]
	require.Equal(t, 50, l.Offered, "50/s for 1s")
	require.Equal(t, l.Offered, l.Delivered)
	require.Positive(t, l.P50Ms)
	require.LessOrEqual(t, l.P50Ms, l.P99Ms)
	require.LessOrEqual(t, l.P99Ms, l.MaxMs)
	require.NotEmpty(t, l.Series)
	require.Positive(t, rep.LatencyRatio)
	// The textbook relay is measured from its first message: at 100
	// messages a second, a warm-up's backlog would outlast its time.
	require.Positive(t, l.WarmupSeconds)
	require.Zero(t, rep.Latency[1].WarmupSeconds)
	require.Positive(t, rep.Latency[1].Delivered)

	text := out.String()
	for _, want := range []string{"SQLite in a temporary folder", "embedded NATS JetStream", "Drain:", "Latency:",
		"textbook", "as fast as the textbook relay", "lower than the textbook relay's", "(warm-up 0s)"} {
		require.Contains(t, text, want)
	}
	require.Contains(t, prog.String(), "drain outbox")
	require.Contains(t, prog.String(), "latency textbook")

	// The chart is well-formed SVG with a line per relay and quantile.
	b, err := os.ReadFile(chart)
	require.NoError(t, err)
	var svg struct {
		XMLName   xml.Name   `xml:"svg"`
		Polylines []struct{} `xml:"polyline"`
	}
	require.NoError(t, xml.Unmarshal(b, &svg))
	require.Len(t, svg.Polylines, 6)
}

// TestRunPostgresJSON runs the drain and latency tests of the outbox relay on
// the real PostgreSQL and NATS, with the JSON report, and checks that the run
// cleans up its table.
func TestRunPostgresJSON(t *testing.T) {
	t.Parallel()
	pool, schema, dsn := testsvc.PostgresSchema(t)
	var out bytes.Buffer
	_, err := Run(t.Context(), Config{DB: dsn, Broker: testsvc.NATSURL(t), Rows: 2000, Rate: 200,
		Duration: time.Second, SkipBaseline: true, DeleteSent: true, AsyncCommit: true, BatchLease: true, JSON: true}, &out)
	require.NoError(t, err)
	var rep Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	require.Contains(t, rep.DB, "PostgreSQL at postgres://postgres@")
	require.True(t, rep.Settings.Notify)
	require.True(t, rep.Settings.AsyncCommit)
	require.True(t, rep.Settings.DeleteSent)
	require.True(t, rep.Settings.BatchLease)
	require.Len(t, rep.Drain, 1)
	require.True(t, rep.Drain[0].Complete)
	require.Equal(t, 2000, rep.Drain[0].Delivered)
	require.Len(t, rep.Latency, 1)
	require.Equal(t, 200, rep.Latency[0].Offered)
	require.Equal(t, 200, rep.Latency[0].Delivered)
	require.Zero(t, rep.DrainRatio, "no baseline, no ratio")

	var tables int
	require.NoError(t, pool.QueryRow(t.Context(),
		"SELECT count(*) FROM pg_tables WHERE schemaname = $1", schema).Scan(&tables))
	require.Zero(t, tables, "the run left its table behind")
}

// TestRunPostgresHeldClaims drains a small backlog on the real PostgreSQL
// with held claims, two relays and four batches in flight each: every batch
// in flight holds a connection of the run's pool until it is settled.
func TestRunPostgresHeldClaims(t *testing.T) {
	t.Parallel()
	pool, schema, dsn := testsvc.PostgresSchema(t)
	var out bytes.Buffer
	rep, err := Run(t.Context(), Config{DB: dsn, Broker: testsvc.NATSURL(t), Rows: 3000, Tests: []string{TestDrain},
		SkipBaseline: true, Relays: 2, MaxInFlight: 4, BatchSize: 100, HeldClaims: true}, &out)
	require.NoError(t, err)
	require.True(t, rep.Settings.HeldClaims)
	require.False(t, rep.Settings.BatchLease)
	require.Len(t, rep.Drain, 1)
	require.True(t, rep.Drain[0].Complete, "checkDelivered found every row sent and the stream holding each once")
	require.Equal(t, 3000, rep.Drain[0].Delivered)
	require.Contains(t, out.String(), ", held claims\n")

	var tables int
	require.NoError(t, pool.QueryRow(t.Context(),
		"SELECT count(*) FROM pg_tables WHERE schemaname = $1", schema).Scan(&tables))
	require.Zero(t, tables, "the run left its table behind")
}

// TestRunPostgresCDC drains and measures latency with source cdc: the
// slot made before the preload holds the whole backlog, and the stream
// delivers each row once, with kept rows and with rows the writers delete
// in their own transactions (which only the log then holds).
func TestRunPostgresCDC(t *testing.T) {
	t.Parallel()
	for _, deletes := range []bool{false, true} {
		t.Run(map[bool]string{false: "KeptRows", true: "WriterDeletes"}[deletes], func(t *testing.T) {
			t.Parallel()
			testsvc.NeedLogical(t)
			pool, _, dsn := testsvc.PostgresSchema(t)
			var out bytes.Buffer
			rep, err := Run(t.Context(), Config{DB: dsn, Broker: testsvc.NATSURL(t), Rows: 2000, Rate: 200, Duration: time.Second,
				SkipBaseline: true, BatchSize: 100, Source: SourceCDC, NoNotify: true, WriterDeletes: deletes}, &out)
			require.NoError(t, err)
			require.Equal(t, SourceCDC, rep.Settings.Source)
			require.Equal(t, deletes, rep.Settings.WriterDeletes)
			require.Len(t, rep.Drain, 1)
			require.True(t, rep.Drain[0].Complete, "checkDelivered found every row sent and the stream holding each once")
			require.Equal(t, 2000, rep.Drain[0].Delivered)
			require.Len(t, rep.Latency, 1)
			require.Positive(t, rep.Latency[0].Delivered)
			require.Contains(t, out.String(), ", source cdc (the write-ahead log)")
			if deletes {
				require.Contains(t, out.String(), ", writers delete their rows\n")
			}
			// The run dropped its slot (named after its table).
			require.NotEmpty(t, rep.Table)
			slot, _ := cdcNames(rep.Table)
			var left int
			require.NoError(t, pool.QueryRow(t.Context(),
				`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&left))
			require.Zero(t, left, "the run left a replication slot behind")
		})
	}
}

// TestRunPostgresReference drains with the outbox relay and then with the
// reference loop, two loops sharing the table, deleting rows and marking
// them sent: the reference loop delivers the whole backlog once
// (checkDelivered counts the stream and the pending rows) and the report
// gives the ratio. The latency test runs the outbox relay alone.
func TestRunPostgresReference(t *testing.T) {
	t.Parallel()
	for _, del := range []bool{false, true} {
		t.Run(map[bool]string{false: "keep", true: "delete"}[del], func(t *testing.T) {
			t.Parallel()
			_, _, dsn := testsvc.PostgresSchema(t)
			var out bytes.Buffer
			rep, err := Run(t.Context(), Config{DB: dsn, Broker: testsvc.NATSURL(t), Rows: 3000, Rate: 100,
				Duration: time.Second, SkipBaseline: true, Reference: true, Relays: 2, BatchSize: 200,
				DeleteSent: del}, &out)
			require.NoError(t, err)
			require.Len(t, rep.Drain, 2)
			ours, ref := rep.Drain[0], rep.Drain[1]
			require.Equal(t, relayOutbox, ours.Relay)
			require.Equal(t, relayReference, ref.Relay)
			require.True(t, ref.Complete)
			require.Equal(t, 3000, ref.Delivered)
			require.Positive(t, ref.MsgsPerSec)
			require.InDelta(t, ours.MsgsPerSec/ref.MsgsPerSec, rep.ReferenceRatio, 1e-9)
			require.Zero(t, rep.DrainRatio, "no baseline, no ratio")
			require.Len(t, rep.Latency, 1, "the reference loop has no latency test")
			require.Equal(t, relayOutbox, rep.Latency[0].Relay)
			require.Contains(t, out.String(), "as fast as the reference loop")
		})
	}
}

// TestReferenceLoop checks that the reference loop is the loop it claims to
// be: a batch per statement, published at once, and the rows gone (or
// marked sent) before the publish.
func TestReferenceLoop(t *testing.T) {
	t.Parallel()
	_, _, dsn := testsvc.PostgresSchema(t)
	cfg := Config{DB: dsn}.withDefaults()
	dir := t.TempDir()
	db, err := openDatabase(t.Context(), cfg, dir, "reference_test")
	require.NoError(t, err)
	t.Cleanup(db.close)
	br, err := openBroker(t.Context(), testsvc.NATSURL(t), dir, "reference_test", 4096)
	require.NoError(t, err)
	t.Cleanup(br.close)
	msgs := make([]*outbox.Message, 250)
	for i := range msgs {
		msgs[i] = message(i, DefaultAggregates, false)
	}
	msgs[0].Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	require.NoError(t, db.write(t.Context(), msgs))
	pub, err := br.publisher()
	require.NoError(t, err)
	rec := &sizes{Publisher: &checkGone{Publisher: pub, t: t, db: db}}
	stop := start(t.Context(), []runner{newReference(db, rec, 100, true)})
	testsvc.Eventually(t, 30*time.Second, func() bool { n, _ := br.stored(t.Context()); return n == 250 }, "all sent")
	require.NoError(t, stop())
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Equal(t, []int{100, 100, 50}, rec.n)

	stream, err := br.js.Stream(t.Context(), br.stream)
	require.NoError(t, err)
	// RETURNING gives the rows in no particular order: find the first message.
	var got *jetstream.RawStreamMsg
	for seq := uint64(1); seq <= 250 && got == nil; seq++ {
		m, err := stream.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		if m.Header.Get(outbox.HeaderMessageID) == msgs[0].MessageID {
			got = m
		}
	}
	require.NotNil(t, got, "message %s is not in the stream", msgs[0].MessageID)
	require.Equal(t, msgs[0].Headers["traceparent"], got.Header.Get("traceparent"), "headers travel")
	require.JSONEq(t, string(msgs[0].Payload), string(got.Data))
}

// checkGone fails the test if a row of a batch being published is still in
// the table.
type checkGone struct {
	outbox.Publisher
	t  *testing.T
	db *database
}

func (c *checkGone) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	var n int
	err := c.db.sqlDB.QueryRowContext(ctx, "SELECT count(*) FROM "+c.db.table+" WHERE id = ANY($1)",
		rowIDs(msgs)).Scan(&n)
	if err != nil || n != 0 {
		c.t.Errorf("batch published with %d of its rows still in the table (%v)", n, err)
	}
	return c.Publisher.Publish(ctx, msgs)
}

func rowIDs(msgs []*outbox.Message) []int64 {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.RowID
	}
	return ids
}

// TestRunMySQL covers the MySQL path with a small drain.
func TestRunMySQL(t *testing.T) {
	t.Parallel()
	_, dsn := testsvc.MySQLDatabase(t)
	var out bytes.Buffer
	rep, err := Run(t.Context(), Config{DB: dsn, Broker: testsvc.NATSURL(t), Rows: 2000, Tests: []string{TestDrain},
		SkipBaseline: true, BatchSize: 500}, &out)
	require.NoError(t, err)
	require.Contains(t, rep.DB, "MySQL at ")
	require.Contains(t, out.String(), "MySQL at root@tcp(", "the DSN's user is shown, as a URL's is (a password would be REDACTED)")
	require.True(t, rep.Drain[0].Complete)
	require.Empty(t, rep.Latency)
}

// TestRunBinaryPayloads drains and measures binary payloads on each
// database: every one is stored, claimed and published (a payload the store
// could not hold or the relay refused would go dead, and the drain would not
// complete).
func TestRunBinaryPayloads(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		db   func(t *testing.T) (db, broker string)
	}{
		{"SQLite", func(t *testing.T) (string, string) { return "", "" }},
		{"PostgreSQL", func(t *testing.T) (string, string) {
			_, _, dsn := testsvc.PostgresSchema(t)
			return dsn, testsvc.NATSURL(t)
		}},
		{"MySQL", func(t *testing.T) (string, string) {
			_, dsn := testsvc.MySQLDatabase(t)
			return dsn, testsvc.NATSURL(t)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, broker := tc.db(t)
			var out bytes.Buffer
			rep, err := Run(t.Context(), Config{DB: db, Broker: broker, Rows: 600, TxRows: 300, Rate: 20,
				Duration: time.Second, SkipBaseline: true, BatchSize: 200, Payload: PayloadBinary}, &out)
			require.NoError(t, err)
			require.Equal(t, PayloadBinary, rep.Settings.Payload)
			require.True(t, rep.Drain[0].Complete)
			require.Equal(t, 600, rep.Drain[0].Delivered)
			require.Equal(t, 20, rep.Latency[0].Delivered)
			require.Contains(t, out.String(), "binary payloads ("+ContentTypeBinary+")")
		})
	}
}

// TestMessagePayloads checks the two payloads a run writes: valid JSON, and
// bytes of the same length that are neither UTF-8 nor JSON.
func TestMessagePayloads(t *testing.T) {
	t.Parallel()
	j, b := message(7, 5, false), message(7, 5, true)
	require.True(t, json.Valid(j.Payload))
	require.Empty(t, j.ContentType)
	require.Len(t, b.Payload, len(j.Payload))
	require.False(t, utf8.Valid(b.Payload))
	require.Equal(t, ContentTypeBinary, b.ContentType)
	require.Equal(t, j.AggregateID, b.AggregateID)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  Config
		want []string // substrings; nil means valid
	}{
		{"Defaults", Config{}, nil},
		{"UnknownTest", Config{Tests: []string{"drain", "soak"}}, []string{`test "soak" is unknown`}},
		{"TestTwice", Config{Tests: []string{"drain", "drain"}}, []string{"given twice"}},
		{"BadNumbers", Config{Rows: -1, Rate: -5, Relays: 100, BatchSize: -1, MaxInFlight: 65},
			[]string{"rows", "rate", "relays", "batch", "in flight"}},
		{"WriterDeletesPolling", Config{WriterDeletes: true},
			[]string{"only the cdc source", "the textbook relay polls the table"}},
		{"BadTxRows", Config{TxRows: 2_000_000}, []string{"tx rows: 2000000 is not between 1 and 1000000"}},
		{"ShortDuration", Config{Duration: time.Millisecond}, []string{"duration"}},
		{"ChartNotSVG", Config{Chart: "x.png"}, []string{"does not end in .svg"}},
		{"ChartWithoutLatency", Config{Chart: "x.svg", Tests: []string{"drain"}}, []string{"not run"}},
		{"UnknownDB", Config{DB: "oracle://scott:tiger@db/x"}, []string{"want postgres://"}},
		{"SQLiteWithoutPath", Config{DB: "sqlite://"}, []string{"needs a file path"}},
		{"MySQLDSN", Config{DB: "root@tcp(127.0.0.1:3306)/test"}, nil},
		{"HeldClaims", Config{HeldClaims: true}, nil},
		{"Adaptive", Config{Adaptive: true, MinPollInterval: time.Millisecond}, nil},
		{"AdaptiveBelowTheSmallestBatch", Config{Adaptive: true, BatchSize: 5}, []string{"below the smallest batch"}},
		{"MinPollTooShort", Config{MinPollInterval: time.Microsecond}, []string{"min poll interval"}},
		{"HeldClaimsWithBatchLease", Config{HeldClaims: true, BatchLease: true}, []string{"held claims exclude batch leases"}},
		{"Reference", Config{DB: "postgres://db/x", Reference: true, Tests: []string{"drain"}}, nil},
		{"ReferenceNotPostgres", Config{Reference: true}, []string{"reference loop needs PostgreSQL"}},
		{"SourceCDC", Config{DB: "postgres://db/x", Source: SourceCDC}, nil},
		{"SourceCDCNotPostgres", Config{Source: SourceCDC}, []string{"source: cdc needs PostgreSQL"}},
		{"BinaryPayloads", Config{Payload: PayloadBinary, SkipBaseline: true}, nil},
		{"BinaryPayloadsWithBaseline", Config{Payload: PayloadBinary}, []string{"binary payloads need --no-baseline"}},
		{"UnknownPayload", Config{Payload: "avro"}, []string{`payload: "avro" is not json or binary`}},
		{"SourceUnknown", Config{Source: "binlog"}, []string{`source: "binlog" is not polling or cdc`}},
		{"Matrix", Config{Matrix: "ordering"}, nil},
		{"MatrixWithDrain", Config{Matrix: "shapes", Tests: []string{"drain"}, Count: 3, Aggregates: 100}, nil},
		{"BadMatrix", Config{Matrix: "colour=red"}, []string{`matrix: axis "colour" is unknown`}},
		{"MatrixWithLatency", Config{Matrix: "shapes", Tests: []string{"drain", "latency"}}, []string{"matrix: it runs drain tests only"}},
		{"MatrixWithReference", Config{DB: "postgres://db/x", Matrix: "shapes", Reference: true}, []string{"matrix: it runs the outbox relay only"}},
		{"MatrixWithChart", Config{Matrix: "shapes", Chart: "x.svg"}, []string{"matrix: it has no latency test to chart"}},
		{"BadAggregatesAndCount", Config{Aggregates: -1, Count: 101}, []string{"aggregates: -1", "count: 101"}},
		{"SentRowsAndContractIndexes", Config{SentRows: 1_000_000, ContractIndexes: true}, nil},
		{"BadSentRows", Config{SentRows: -1}, []string{"sent rows: -1 is not between 0 and 100000000"}},
		{"SentRowsWriterDeletes", Config{DB: "postgres://db/x", Source: SourceCDC, WriterDeletes: true, SkipBaseline: true, SentRows: 5},
			[]string{"sent rows: writers that delete their rows leave none to keep"}},
		{"ReferenceWithoutDrain", Config{DB: "postgres://db/x", Reference: true, Tests: []string{"latency"}},
			[]string{"reference: it runs in the drain test, which is not run"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.withDefaults().validate()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			require.NotContains(t, err.Error(), "tiger", "a password reached the error")
		})
	}
	_, err := Run(t.Context(), Config{Rows: -1}, io.Discard)
	require.ErrorContains(t, err, "bench: rows")
}

// sizes records the size of every batch published.
type sizes struct {
	outbox.Publisher
	mu sync.Mutex
	n  []int
}

func (s *sizes) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	s.mu.Lock()
	s.n = append(s.n, len(msgs))
	s.mu.Unlock()
	return s.Publisher.Publish(ctx, msgs)
}

// TestTextbookRelay checks that the baseline is the loop it claims to be:
// one message per publish, at most 100 rows per poll, a poll a second.
func TestTextbookRelay(t *testing.T) {
	t.Parallel()
	cfg := Config{}.withDefaults()
	dir := t.TempDir()
	db, err := openDatabase(t.Context(), cfg, dir, "textbook_test")
	require.NoError(t, err)
	t.Cleanup(db.close)
	br, err := openBroker(t.Context(), "", dir, "textbook_test", 4096)
	require.NoError(t, err)
	t.Cleanup(br.close)
	msgs := make([]*outbox.Message, 150)
	for i := range msgs {
		msgs[i] = message(i, DefaultAggregates, false)
	}
	require.NoError(t, db.write(t.Context(), msgs))
	pub, err := br.publisher()
	require.NoError(t, err)
	rec := &sizes{Publisher: pub}
	stop := start(t.Context(), []runner{&textbook{db: db, pub: rec}})
	begin := time.Now()
	testsvc.Eventually(t, 30*time.Second, func() bool { n, _ := br.stored(t.Context()); return n >= 100 }, "first poll")
	firstPoll := time.Since(begin)
	testsvc.Eventually(t, 60*time.Second, func() bool { n, _ := br.stored(t.Context()); return n == 150 }, "all sent")
	// The broker has the last message before the relay marks its row sent.
	testsvc.Eventually(t, 30*time.Second, func() bool { n, err := db.pending(t.Context()); return err == nil && n == 0 },
		"every row marked sent")
	require.NoError(t, stop())
	require.GreaterOrEqual(t, time.Since(begin), textbookInterval, "two polls of 100 and 50 take a pause")
	t.Logf("first poll done after %v", firstPoll)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.n, 150)
	for _, n := range rec.n {
		require.Equal(t, 1, n)
	}
}

func TestLatencies(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLatencies(t0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	m := func(id string) *outbox.Message { return &outbox.Message{MessageID: id} }
	l.committed("a", ms(0))
	l.acked([]*outbox.Message{m("a")}, []error{nil}, ms(4)) // 4 ms
	l.acked([]*outbox.Message{m("b")}, []error{nil}, ms(1510))
	l.committed("b", ms(1500)) // ack seen before the writer noted the commit: 10 ms
	l.committed("c", ms(1600))
	l.acked([]*outbox.Message{m("c"), m("a")}, []error{errors.New("nack"), nil}, ms(1700)) // c failed; a again is a duplicate
	l.acked([]*outbox.Message{m("c")}, []error{nil}, ms(1800))                             // 200 ms
	r := l.result()
	require.Equal(t, 3, r.Delivered)
	require.InDelta(t, 10, r.P50Ms, 0.1)
	require.InDelta(t, 200, r.MaxMs, 0.5)
	require.Equal(t, []int{0, 1}, []int{r.Series[0].Second, r.Series[1].Second})
	require.Equal(t, 1, r.Series[0].Delivered)
	require.Equal(t, 2, r.Series[1].Delivered)
	require.InDelta(t, 4, r.Series[0].MaxMs, 0.01)
}

func TestFormat(t *testing.T) {
	t.Parallel()
	require.Equal(t, "1,234,567", thousands(1234567.4))
	require.Equal(t, "-1,000", thousands(-1000))
	require.Equal(t, "999", thousands(999))
	require.Equal(t, "3.25ms", fmtMs(3.25))
	require.Equal(t, "42ms", fmtMs(42.2))
	require.Equal(t, "1.5s", fmtMs(1500))
	require.Equal(t, "-", fmtMs(0))
	require.True(t, strings.HasSuffix(ratio(243.94), "244"))
}

// TestReportWriteErrors: write transactions that failed during a latency
// test (a database that could not take the rate next to that relay) are
// reported under the table, not dropped, and the run still has its figures.
func TestReportWriteErrors(t *testing.T) {
	t.Parallel()
	rep := &Report{DB: "MySQL at db\x1b[2J", Broker: "NATS at \u202enats", Latency: []LatencyResult{
		{Relay: relayOutbox, Rate: 1000, Seconds: 10, Offered: 10000, Delivered: 10000, P99Ms: 7},
		{Relay: relayTextbook, Rate: 1000, Seconds: 10, Offered: 9998, Delivered: 900, P99Ms: 18000,
			WriteErrors: 2, FirstWriteError: "database is locked (5) (SQLITE_BUSY)\x1b[31m"},
	}}
	var out strings.Builder
	require.NoError(t, writeReport(&out, rep, false))
	require.Contains(t, out.String(), "textbook: 2 of 10,000 write transactions failed while it ran, the first with: database is locked")
	require.Contains(t, out.String(), `(SQLITE_BUSY)\x1b[31m`, "a driver's error, escaped")
	require.Contains(t, out.String(), `outbox bench: MySQL at db\x1b[2J -> NATS at \u202enats`)
	require.NotContains(t, out.String(), "\x1b")
	require.NotContains(t, out.String(), "\u202e")
	require.NotContains(t, out.String(), "outbox: 0 of")
}

// TestDefaultWriters: one writer on SQLite (it takes one at a time), enough
// for the rate on the servers.
func TestDefaultWriters(t *testing.T) {
	t.Parallel()
	for db, want := range map[string]int{"": 1, "sqlite:///tmp/x.db": 1, "postgres://h/db": 32, "mysql://u@h/db": 32} {
		require.Equal(t, want, Config{DB: db}.withDefaults().Writers, db)
	}
	require.Equal(t, 5, Config{DB: "sqlite:///tmp/x.db", Writers: 5}.withDefaults().Writers, "an explicit count stays")
}
