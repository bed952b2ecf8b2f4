package benchcmd

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/redact"
)

// The tests a run can do.
const (
	TestDrain   = "drain"   // preload rows, time how long the relay takes to publish them all
	TestLatency = "latency" // offer a steady rate of writes, measure commit to broker acknowledgement
)

// The sources of the outbox relay (Config.Source).
const (
	SourcePolling = "polling"
	SourceCDC     = "cdc"
)

// The payloads of the messages a run writes (Config.Payload).
const (
	// PayloadJSON is a small JSON document, the shape of a typical event.
	PayloadJSON = "json"
	// PayloadBinary is bytes of the same length that are not UTF-8 (as a
	// Protobuf encoding is), with the content type application/x-protobuf:
	// the stores keep them in payload_bytes.
	PayloadBinary = "binary"
)

// ContentTypeBinary is the content type of a PayloadBinary message.
const ContentTypeBinary = "application/x-protobuf"

// Defaults of [Config], used where a field is zero.
const (
	DefaultRows         = 100_000
	DefaultTxRows       = 1_000
	DefaultRate         = 1_000
	DefaultDuration     = 10 * time.Second
	DefaultBaselineTime = 20 * time.Second
	DefaultRelays       = 1
	// DefaultBatchSize and DefaultMaxInFlight are the relay settings the
	// bench uses unless told otherwise: larger batches and a pipeline of
	// batches in flight, the settings docs/tuning.md recommends for
	// throughput. Pass the library's defaults to measure those instead.
	DefaultBatchSize   = 1000
	DefaultMaxInFlight = 4
	// DefaultNotifyInterval is how often, at most, the latency test's writers
	// send a NOTIFY (pgstore.WithNotifyInterval): PostgreSQL commits
	// notifying transactions one at a time, which at one NOTIFY per
	// transaction caps the writers far below 1,000 transactions a second.
	DefaultNotifyInterval = 5 * time.Millisecond
	// DefaultPollInterval is the relay's poll interval in the bench; with
	// notifications (PostgreSQL) or adaptive polling it is only the idle rate.
	DefaultPollInterval = time.Second
	// DefaultAggregates is how many aggregates the messages of a test are
	// spread over, round-robin (message i belongs to aggregate i mod N).
	DefaultAggregates = 10_000
	// DefaultCount is how many times a matrix runs each of its cells.
	DefaultCount = 1
)

// Config says what a run measures, where, and with which relay settings.
// The zero value runs both tests against embedded SQLite and NATS with the
// defaults above.
type Config struct {
	// DB is the database: postgres://, postgresql://, mysql:// (or a
	// go-sql-driver DSN) or sqlite://PATH. Empty means SQLite in a temporary
	// folder. The run creates a table of its own and drops it at the end.
	DB string
	// Broker is the NATS server URL. Empty means a NATS JetStream server
	// embedded in the process. The run creates a stream of its own and
	// deletes it at the end.
	Broker string

	// Tests are the tests to run, in order: TestDrain, TestLatency. Empty
	// means both, or the drain test alone with Matrix.
	Tests []string
	// Rows is how many rows the drain test preloads. Default: DefaultRows.
	Rows int
	// TxRows is how many rows each transaction of the drain's preload
	// writes; set it to Rows to drain one transaction as large as the
	// backlog. The memory figures are the whole process's, the preload's
	// writer included (bench/relay-memory.sh measures a relay process
	// alone). Default: DefaultTxRows.
	TxRows int
	// Rate is the latency test's offered rate, in messages (one per
	// transaction) per second. Default: DefaultRate.
	Rate int
	// Duration is how long the latency test offers that rate. Default: DefaultDuration.
	Duration time.Duration
	// Writers is how many transactions the latency test may have open at
	// once to keep up the rate. Default: Rate/30, at least 8 and at most 32
	// (32 for the default rate): one-message transactions wait for the disk.
	// On SQLite the default is 1: it lets one writer in at a time, and more
	// writers only take turns at its lock, where SQLite's busy handler
	// (sleeps of up to 100 ms) serves newcomers before those who waited, the
	// relay's claims among them (docs/tuning.md has the figures).
	Writers int

	// SkipBaseline skips the textbook relay that each test otherwise also runs.
	SkipBaseline bool
	// BaselineTime caps each test of the textbook relay, which may be too
	// slow to finish. Default: DefaultBaselineTime.
	BaselineTime time.Duration
	// Reference also drains the backlog with the reference loop: one
	// statement per batch that deletes the rows (or marks them sent) and
	// returns them, then the batch published at once and its
	// acknowledgements awaited, one batch at a time, with Relays loops. It
	// does the least database work per message a relay can, and is unsafe
	// as a relay (a crash after the statement loses the batch): a yardstick
	// of the database, broker and machine under test, to compare runs on
	// different machines by. PostgreSQL and the drain test only.
	Reference bool

	// Relays is how many relays (each a Relay.Run loop) share the table. Default: DefaultRelays.
	Relays int
	// BatchSize is the relay's batch size (outbox.WithBatchSize). Default: DefaultBatchSize.
	BatchSize int
	// MaxInFlight is how many batches each relay may have at the broker at
	// once (outbox.WithMaxInFlight). Default: DefaultMaxInFlight.
	MaxInFlight int
	// Adaptive lets each relay size its batches and its batches in flight
	// itself (outbox.WithBatchSizeRange, outbox.WithMaxInFlightRange), with
	// BatchSize and MaxInFlight as the upper bounds and the library's
	// minimums as the lower ones: the library's default behaviour.
	Adaptive bool
	// PollInterval is the relay's idle poll interval. Default: DefaultPollInterval.
	PollInterval time.Duration
	// MinPollInterval is the relay's shortest wait between claims while
	// messages trickle in (outbox.WithMinPollInterval). Zero means the
	// library's default.
	MinPollInterval time.Duration
	// Ordering turns on per-aggregate ordering (outbox.WithOrdering with
	// outbox.DeadBlocks) in the outbox relay. Default: off (the --ordering
	// flag of outbox bench is on by default, as ordering is in the relay).
	Ordering bool
	// NoSlots turns off the relay slots of ordered relays
	// (outbox.WithRelayTTL(0)): each claim then takes any aggregate's rows.
	NoSlots bool
	// Aggregates is how many aggregates the messages are spread over,
	// round-robin, as concurrent business transactions would write them.
	// With ordering on, an aggregate has at most one message in flight, so
	// fewer aggregates than a claim's batch size cap what a claim can take.
	// Default: DefaultAggregates.
	Aggregates int

	// Matrix, when set, makes the run a matrix of drain tests instead of
	// the drain and latency tests: a preset (MatrixOrdering, MatrixShapes)
	// or axes such as "batch=100,1000 relays=1,3 ordering=off,on" (see
	// ParseMatrix). Each cell drains Rows rows with the outbox relay; the
	// cells run one after another, Count times over (round after round, so
	// that a machine's changing load spreads over every cell), and the
	// report gives each cell's median and, where both were measured, the
	// ordered drain's rate over the unordered one's.
	Matrix string
	// Count is how many rounds a matrix runs. Default: DefaultCount.
	Count int
	// librarySizing passes no batch size and no batches in flight to the
	// relay, so that it runs with the library's defaults (a matrix's
	// ShapeDefaults); BatchSize and MaxInFlight then only describe them.
	librarySizing bool
	// DeleteSent deletes published rows instead of marking them sent.
	DeleteSent bool
	// Source is where the outbox relay finds messages: SourcePolling (or
	// empty) claims from the table; SourceCDC reads the table's inserts
	// from the write-ahead log (store/pgcdc, PostgreSQL with wal_level =
	// logical only). With cdc each test of the outbox relay creates a slot
	// before it writes and drops it at its end.
	Source string
	// Payload is what the messages carry: PayloadJSON (or empty) or
	// PayloadBinary, without the textbook relay (which reads the JSON
	// column only).
	Payload string
	// WriterDeletes makes the run's writers delete each row in the
	// transaction that inserted it (outbox.WithDeleteAfterInsert,
	// Debezium's way): the table stays empty and the messages exist only in
	// the write-ahead log. SourceCDC only, without the textbook relay (which
	// polls the table, so it would find nothing).
	WriterDeletes bool
	// AsyncCommit commits the relay's statements without waiting for the
	// disk (PostgreSQL only: pgstore.WithAsyncCommit).
	AsyncCommit bool
	// NoNotify turns off LISTEN/NOTIFY (PostgreSQL only; on by default).
	NoNotify bool
	// NotifyInterval is how often, at most, writes send a NOTIFY
	// (PostgreSQL only). Zero means DefaultNotifyInterval; a negative value
	// makes every write transaction notify.
	NotifyInterval time.Duration
	// BatchLease leases each claimed batch with one row of a side table
	// instead of writing every claimed row (PostgreSQL only: pgstore.WithBatchLease).
	BatchLease bool
	// HeldClaims locks each claimed batch in a transaction held open while
	// it is published, and settles the batch in it (PostgreSQL only:
	// pgstore.WithHeldClaims). A relay then holds a connection per batch in
	// flight, which the run's pool allows for. Exclusive with BatchLease.
	HeldClaims bool

	// ContractIndexes leaves the run's table with only the contract's
	// indexes, (status, next_retry_at) and (aggregate_type, aggregate_id),
	// as a team's own table made from docs/table-contract.md has them: the
	// run drops the indexes Migrate adds for claims (the store's
	// MissingIndexes must then list them), so the drains measure claims on
	// the contract's indexes.
	ContractIndexes bool
	// SentRows is how many sent rows (status 1) the table keeps ahead of
	// every test's messages, as a table keeping a week of history does:
	// written once, before the first test, and kept by every test. 0: none.
	SentRows int

	// JSON writes the report to out as JSON instead of a table.
	JSON bool
	// Chart, when set, is a file to write a chart of latency over time to
	// (SVG; the name must end in .svg).
	Chart string
	// CPUProfile, when set, is a file to write a CPU profile (pprof) of
	// each test of the outbox relay to, from the relays' start to their
	// stop: the whole process, so with --broker unset the embedded NATS
	// server too. A run of both tests writes FILE with the test's name
	// before its extension (cpu.drain.pprof, cpu.latency.pprof).
	CPUProfile string
	// Progress receives a progress bar while the run goes on (redrawn in
	// place on a terminal, a line per second otherwise). Nil means none.
	Progress io.Writer
	// Logger receives the outbox relays' logs. Nil means none.
	Logger *slog.Logger
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	switch {
	case len(c.Tests) > 0:
	case c.Matrix != "":
		c.Tests = []string{TestDrain} // a matrix is made of drain tests
	default:
		c.Tests = []string{TestDrain, TestLatency}
	}
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	set(&c.Rows, DefaultRows)
	set(&c.TxRows, DefaultTxRows)
	set(&c.Rate, DefaultRate)
	if kind, err := dbKind(c.DB); c.DB == "" || (err == nil && kind == "sqlite") { // "": SQLite in a temporary folder
		set(&c.Writers, 1)
	} else {
		set(&c.Writers, min(32, max(8, c.Rate/30)))
	}
	set(&c.Relays, DefaultRelays)
	set(&c.BatchSize, DefaultBatchSize)
	set(&c.MaxInFlight, DefaultMaxInFlight)
	set(&c.Aggregates, DefaultAggregates)
	set(&c.Count, DefaultCount)
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.BaselineTime == 0 {
		c.BaselineTime = DefaultBaselineTime
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.NotifyInterval == 0 {
		c.NotifyInterval = DefaultNotifyInterval
	}
	return c
}

// validate reports every invalid field at once.
func (c Config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	seen := map[string]bool{}
	for _, t := range c.Tests {
		check(t == TestDrain || t == TestLatency, "test %q is unknown (want %s or %s)", t, TestDrain, TestLatency)
		check(!seen[t], "test %q is given twice", t)
		seen[t] = true
	}
	check(c.Rows >= 1 && c.Rows <= 100_000_000, "rows: %d is not between 1 and 100000000", c.Rows)
	check(c.SentRows >= 0 && c.SentRows <= 100_000_000, "sent rows: %d is not between 0 and 100000000", c.SentRows)
	check(c.SentRows == 0 || !c.WriterDeletes, "sent rows: writers that delete their rows leave none to keep")
	check(c.TxRows >= 1 && c.TxRows <= 1_000_000, "tx rows: %d is not between 1 and 1000000", c.TxRows)
	check(c.Rate >= 1 && c.Rate <= 1_000_000, "rate: %d is not between 1 and 1000000 per second", c.Rate)
	check(c.Duration >= time.Second, "duration: %v is shorter than 1s", c.Duration)
	check(c.Writers >= 1 && c.Writers <= 256, "writers: %d is not between 1 and 256", c.Writers)
	check(c.BaselineTime >= time.Second, "baseline time: %v is shorter than 1s", c.BaselineTime)
	check(c.Relays >= 1 && c.Relays <= 64, "relays: %d is not between 1 and 64", c.Relays)
	check(c.BatchSize >= 1 && c.BatchSize <= 100_000, "batch: %d is not between 1 and 100000", c.BatchSize)
	check(c.MaxInFlight >= 1 && c.MaxInFlight <= 64, "in flight: %d is not between 1 and 64", c.MaxInFlight)
	check(c.PollInterval > 0, "poll interval: %v is not positive", c.PollInterval)
	check(c.MinPollInterval == 0 || c.MinPollInterval >= time.Millisecond, "min poll interval: %v is less than 1ms", c.MinPollInterval)
	check(!c.Adaptive || c.BatchSize >= outbox.DefaultMinBatchSize,
		"batch: %d is below the smallest batch of an adaptive relay (%d)", c.BatchSize, outbox.DefaultMinBatchSize)
	check(!c.HeldClaims || !c.BatchLease, "held claims exclude batch leases (two ways of claiming; choose one)")
	check(!c.HeldClaims || !c.Ordering, "held claims need --ordering=false (ordered claims lease their rows; they are never held)")
	check(c.Aggregates >= 1 && c.Aggregates <= 100_000_000, "aggregates: %d is not between 1 and 100000000", c.Aggregates)
	check(c.Count >= 1 && c.Count <= 100, "count: %d is not between 1 and 100", c.Count)
	if c.Matrix != "" {
		_, err := ParseMatrix(c.Matrix)
		check(err == nil, "matrix: %v", err)
		check(!slices.Contains(c.Tests, TestLatency), "matrix: it runs drain tests only, not the %s test", TestLatency)
		check(!c.Reference, "matrix: it runs the outbox relay only, not the reference loop")
		check(c.Chart == "", "matrix: it has no latency test to chart")
		check(c.CPUProfile == "", "matrix: profile one shape with the drain test instead (--cpuprofile)")
	}
	if c.Reference {
		kind, _ := dbKind(c.DB)
		check(kind == "postgres", "reference: the reference loop needs PostgreSQL (DELETE … RETURNING with SKIP LOCKED)")
		check(slices.Contains(c.Tests, TestDrain), "reference: it runs in the drain test, which is not run")
	}
	check(c.Source == "" || c.Source == SourcePolling || c.Source == SourceCDC,
		"source: %q is not %s or %s", c.Source, SourcePolling, SourceCDC)
	if c.Source == SourceCDC {
		kind, _ := dbKind(c.DB)
		check(kind == "postgres", "source: cdc needs PostgreSQL")
	}
	check(c.Payload == "" || c.Payload == PayloadJSON || c.Payload == PayloadBinary,
		"payload: %q is not %s or %s", c.Payload, PayloadJSON, PayloadBinary)
	check(c.Payload != PayloadBinary || c.SkipBaseline,
		"payload: the textbook relay reads the JSON column only, so binary payloads need --no-baseline")
	if c.WriterDeletes {
		check(c.Source == SourceCDC, "writer deletes: only the cdc source reads rows that writers delete (--source cdc)")
		check(c.SkipBaseline, "writer deletes: the textbook relay polls the table, which stays empty (--no-baseline)")
		check(c.Matrix == "", "writer deletes: not with a matrix")
	}
	if c.Chart != "" {
		check(strings.EqualFold(filepath.Ext(c.Chart), ".svg"), "chart: %q does not end in .svg", c.Chart)
		check(slices.Contains(c.Tests, TestLatency), "chart: it draws the latency test, which is not run")
	}
	if c.DB != "" {
		_, err := dbKind(c.DB)
		check(err == nil, "db: %v", err)
	}
	return errors.Join(errs...)
}

// dbKind returns the kind of database a URL names: postgres, mysql or sqlite.
func dbKind(raw string) (string, error) {
	switch {
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return "postgres", nil
	case strings.HasPrefix(raw, "sqlite://"):
		if strings.TrimPrefix(raw, "sqlite://") == "" {
			return "", errors.New("sqlite:// needs a file path")
		}
		return "sqlite", nil
	case strings.HasPrefix(raw, "mysql://"), strings.Contains(raw, "@tcp("):
		return "mysql", nil
	}
	return "", fmt.Errorf("%s: want postgres://, mysql://, or sqlite://PATH", redact.URLs(raw))
}

// Validate returns an error naming every invalid field of cfg (zero fields
// take their defaults), so that a caller can tell bad input from a run that
// failed; [Run] checks the same.
func Validate(cfg Config) error { return cfg.withDefaults().validate() }
