package cli

import (
	"context"
	"log/slog"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/outboxkit/outbox/internal/benchcmd"
)

func init() { extraCommands = append(extraCommands, benchCommand) }

// benchCommand is `outbox bench`: internal/benchcmd on the user's database
// and broker, or on embedded SQLite and NATS.
func benchCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "bench",
		Usage: "measure the relay's throughput and latency, next to a textbook relay",
		Description: "Runs a drain test (preload --rows, time until the broker has acknowledged them all) and a\n" +
			"latency test (--rate one-message transactions a second for --duration, commit to broker ack),\n" +
			"each also with the textbook relay (1 s fixed-delay poll of 100 rows, publish one by one, one\n" +
			"UPDATE per row) on the same database and broker, and prints a table with the ratios, or JSON.\n" +
			"Without --db and --broker it runs on SQLite in a temporary folder and an embedded NATS server.\n" +
			"It creates a table and a stream of its own and removes them at the end. Progress goes to stderr.\n" +
			"With --matrix it runs only drains, one per shape of the matrix and ordering off and on, one shape\n" +
			"after the other (--count rounds), and prints a table of msgs/s with the ordered/unordered ratio.",
		Flags: benchFlags(),
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			if cmd.Args().Present() {
				return usage(errUnexpectedArgs(cmd))
			}
			cfg := benchConfig(cmd)
			if err := benchcmd.Validate(cfg); err != nil {
				return usage(err)
			}
			_, err := benchcmd.Run(ctx, cfg, cmd.Root().Writer)
			return err
		},
	}
}

// benchFlags are the flags of `outbox bench`.
func benchFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "db", Usage: "database `URL`: postgres://, mysql:// or sqlite://PATH (default: SQLite in a temporary folder)"},
		&ucli.StringFlag{Name: "broker", Usage: "NATS `URL` (default: an embedded NATS JetStream server)"},
		&ucli.StringFlag{Name: "test", Usage: "tests to run, comma-separated: drain, latency", Value: "drain,latency"},
		&ucli.IntFlag{Name: "rows", Usage: "rows the drain test preloads", Value: benchcmd.DefaultRows},
		&ucli.IntFlag{Name: "tx-rows", Usage: "rows per transaction of the drain's preload (--tx-rows 100000: one large transaction)", Value: benchcmd.DefaultTxRows},
		&ucli.IntFlag{Name: "rate", Usage: "messages a second the latency test offers", Value: benchcmd.DefaultRate},
		&ucli.DurationFlag{Name: "duration", Usage: "how long the latency test offers its rate", Value: benchcmd.DefaultDuration},
		&ucli.IntFlag{Name: "writers", Usage: "transactions the latency test may have open at once (default: rate/30, 8 to 32; 1 on SQLite)"},
		&ucli.BoolWithInverseFlag{Name: "baseline", Usage: "also run the textbook relay", Value: true},
		&ucli.DurationFlag{Name: "baseline-time", Usage: "cap of each textbook relay test", Value: benchcmd.DefaultBaselineTime},
		&ucli.BoolFlag{Name: "reference", Usage: "PostgreSQL: also drain with the reference loop (one DELETE … RETURNING per batch, then publish it), a yardstick of the machine"},
		&ucli.IntFlag{Name: "relays", Usage: "relays sharing the table", Value: benchcmd.DefaultRelays},
		&ucli.IntFlag{Name: "batch", Usage: "the relay's batch size", Value: benchcmd.DefaultBatchSize},
		&ucli.BoolFlag{Name: "ordering", Value: true, Usage: "per-aggregate ordering in the relay, on by default as in the relay (--ordering=false: off)"},
		&ucli.BoolWithInverseFlag{Name: "slots", Usage: "with ordering: relays share the aggregates out as slots (--no-slots: off, outbox.WithRelayTTL(0))", Value: true},
		&ucli.IntFlag{Name: "aggregates", Usage: "aggregates the messages are spread over, round-robin", Value: benchcmd.DefaultAggregates},
		&ucli.StringFlag{Name: "matrix", Usage: "run a matrix of drains instead of the tests: a preset (" + benchcmd.MatrixShapes +
			": the library's defaults then batch 1000 with 4 in flight, ordering off and on; " + benchcmd.MatrixOrdering +
			": the same × aggregates 100,5000 × relays 1,3) or `AXES` such as \"batch=100,1000 relays=1,3 ordering=off,on\"" +
			" (axes: shape=defaults,tuned batch in-flight relays aggregates ordering)"},
		&ucli.IntFlag{Name: "count", Usage: "rounds of the matrix (the report gives medians)", Value: benchcmd.DefaultCount},
		&ucli.IntFlag{Name: "in-flight", Usage: "batches each relay may have at the broker at once", Value: benchcmd.DefaultMaxInFlight},
		&ucli.BoolFlag{Name: "adaptive", Usage: "let the relay size its batches and batches in flight, up to --batch and --in-flight (the library's default behaviour)"},
		&ucli.DurationFlag{Name: "poll-interval", Usage: "the relay's idle poll interval", Value: benchcmd.DefaultPollInterval},
		&ucli.DurationFlag{Name: "min-poll-interval", Usage: "the relay's shortest wait between claims while messages trickle in (default: the library's)"},
		&ucli.BoolFlag{Name: "delete-sent", Usage: "delete published rows instead of marking them sent"},
		&ucli.StringFlag{Name: "source", Usage: "where the outbox relay finds messages: `SOURCE` polling or cdc (PostgreSQL, wal_level = logical: the write-ahead log)", Value: benchcmd.SourcePolling},
		&ucli.StringFlag{Name: "payload", Usage: "what the messages carry: `KIND` json, or binary (as many bytes that are not UTF-8, content type " + benchcmd.ContentTypeBinary + "; needs --no-baseline)", Value: benchcmd.PayloadJSON},
		&ucli.BoolFlag{Name: "writer-deletes", Usage: "with --source cdc: writers delete each row in the transaction that inserted it (Debezium's way; the table stays empty); needs --no-baseline"},
		&ucli.BoolFlag{Name: "async-commit", Usage: "PostgreSQL: commit the relay's statements without waiting for the disk"},
		&ucli.BoolWithInverseFlag{Name: "notify", Usage: "PostgreSQL: wake the relay with LISTEN/NOTIFY", Value: true},
		&ucli.DurationFlag{Name: "notify-interval", Usage: "PostgreSQL: a write notifies at most this often (0: every write)",
			Value: benchcmd.DefaultNotifyInterval},
		&ucli.BoolFlag{Name: "batch-lease", Usage: "PostgreSQL: lease each batch with one row of a side table, not every row"},
		&ucli.BoolFlag{Name: "held-claims", Usage: "PostgreSQL: lock each batch in a transaction held open while it is published, and settle it there"},
		&ucli.BoolFlag{Name: "contract-indexes", Usage: "give the run's table only the contract's indexes, (status, next_retry_at) and (aggregate_type, aggregate_id), as a table made by hand from docs/table-contract.md has: drop those outbox migrate adds for claims"},
		&ucli.IntFlag{Name: "sent-rows", Usage: "keep `N` sent rows in the table ahead of every test's messages, over the same aggregates, as a table holding a week of history does"},
		&ucli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		&ucli.StringFlag{Name: "chart", Usage: "write a chart of latency over time to `FILE` (.svg)", TakesFile: true},
		&ucli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile (pprof) of the outbox relay's test to `FILE` (FILE.drain / FILE.latency with both tests)", TakesFile: true},
		&ucli.BoolFlag{Name: "quiet", Usage: "no progress bar"},
		&ucli.BoolFlag{Name: "verbose", Usage: "log the relays' warnings and errors to stderr"},
	}
}

// benchConfig builds the benchmark's Config from the flags of cmd.
func benchConfig(cmd *ucli.Command) benchcmd.Config {
	var tests []string
	for t := range strings.SplitSeq(cmd.String("test"), ",") {
		if !cmd.IsSet("test") && cmd.IsSet("matrix") {
			break // a matrix is made of drain tests
		}
		if t = strings.TrimSpace(t); t != "" {
			tests = append(tests, t)
		}
	}
	cfg := benchcmd.Config{
		DB: cmd.String("db"), Broker: cmd.String("broker"), Tests: tests,
		Rows: cmd.Int("rows"), TxRows: cmd.Int("tx-rows"), Rate: cmd.Int("rate"), Duration: cmd.Duration("duration"),
		Writers: cmd.Int("writers"), SkipBaseline: !cmd.Bool("baseline"),
		BaselineTime: cmd.Duration("baseline-time"), Reference: cmd.Bool("reference"), Relays: cmd.Int("relays"),
		BatchSize: cmd.Int("batch"), MaxInFlight: cmd.Int("in-flight"),
		Adaptive: cmd.Bool("adaptive"), MinPollInterval: cmd.Duration("min-poll-interval"),
		PollInterval: cmd.Duration("poll-interval"), DeleteSent: cmd.Bool("delete-sent"), Source: cmd.String("source"), WriterDeletes: cmd.Bool("writer-deletes"),
		Payload:     cmd.String("payload"),
		AsyncCommit: cmd.Bool("async-commit"), NoNotify: !cmd.Bool("notify"), BatchLease: cmd.Bool("batch-lease"),
		HeldClaims: cmd.Bool("held-claims"), NoSlots: !cmd.Bool("slots"), JSON: cmd.Bool("json"), Chart: cmd.String("chart"),
		CPUProfile:     cmd.String("cpuprofile"),
		NotifyInterval: cmd.Duration("notify-interval"), Ordering: cmd.Bool("ordering"),
		Aggregates: cmd.Int("aggregates"), Matrix: cmd.String("matrix"), Count: cmd.Int("count"),
		ContractIndexes: cmd.Bool("contract-indexes"), SentRows: cmd.Int("sent-rows"),
	}
	if cfg.NotifyInterval == 0 {
		cfg.NotifyInterval = -1 // every write: Config's zero means its default
	}
	if !cmd.Bool("quiet") {
		cfg.Progress = cmd.Root().ErrWriter
	}
	if cmd.Bool("verbose") {
		cfg.Logger = slog.New(slog.NewTextHandler(cmd.Root().ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return cfg
}

// errUnexpectedArgs reports positional arguments a command does not take.
func errUnexpectedArgs(cmd *ucli.Command) error {
	return &argsError{cmd: cmd.Name, args: cmd.Args().Slice()}
}

type argsError struct {
	cmd  string
	args []string
}

func (e *argsError) Error() string {
	return "outbox " + e.cmd + " takes no arguments, got " + strings.Join(e.args, " ")
}
