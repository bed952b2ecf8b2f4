package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v3"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/daemon"
	"github.com/outboxkit/outbox/internal/demo"
	"github.com/outboxkit/outbox/internal/liblog"
	"github.com/outboxkit/outbox/internal/termsafe"
	"github.com/outboxkit/outbox/store/pgcdc"
)

// dbFlags are the settings the database commands read.
var dbFlags = []string{"db", "table"}

// migrateFlags are the settings `outbox migrate` reads: what the table needs
// beyond the migrations (the NOTIFY trigger, the batch lease table) is
// installed only when asked for.
var migrateFlags = append(slices.Clone(dbFlags), "notify_trigger", "batch_lease", "cdc_slot", "cdc_publication")

func relayCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "relay",
		Usage: "run the relay: claim committed messages, publish them, acknowledge them",
		Description: "Runs until SIGINT or SIGTERM, then finishes the batch in flight and exits 0.\n" +
			"Logs go to stderr. Brokers, routes and broker options (NATS stream and subjects, prefixes,\n" +
			"webhook secrets) come from the --config file; --broker alone sends everything to one broker.\n" +
			"It also archives on a schedule: every --archive-every (1h; 0 = off, off with --delete-sent) it\n" +
			"moves sent rows older than --archive-older-than (168h) into the table's archive table, created\n" +
			"on first use (or deletes them: --archive-delete), in short batches. See the archive section of\n" +
			"docs/operations.md.",
		Flags: append([]ucli.Flag{configFlag()}, settingFlags()...),
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return usage(err)
			}
			logger, err := daemon.NewLogger(cmd.Root().ErrWriter, cfg.LogLevel, cfg.LogFormat)
			if err != nil {
				return usage(err)
			}
			// The client libraries' own lines (go-redis, the MySQL driver,
			// ...) too, when main installed the hooks (see liblog).
			defer liblog.SetLogger(logger)()
			d, err := daemon.New(cfg, logger, daemon.WithStdout(cmd.Root().Writer))
			if err != nil {
				return usage(err)
			}
			if err := d.Run(ctx); err != nil && !(ctx.Err() != nil && errors.Is(err, context.Canceled)) {
				return err
			}
			return nil // a stop request, also one that came while connecting
		},
	}
}

// refuseMapped refuses a command that reads the table through the polling
// store (status, dead, archive), which reads the rows' state columns, when
// the config maps a log-only table (columns: without state columns). The
// store reads a table mapped with its state columns (pgstore.WithColumns).
func refuseMapped(cfg *config.Config, command string) error {
	if !cfg.LogOnly() {
		return nil
	}
	hint := ""
	if cfg.LogOnly() {
		hint = fmt.Sprintf("; its dead messages are in %s: outbox %s --db URL --table %s, without the config",
			cfg.CDCDeadTableName(), command, cfg.CDCDeadTableName())
	}
	return usage(fmt.Errorf("%s reads the rows' state columns, and table %s has a log-only columns: mapping (none)%s",
		command, cfg.Table, hint))
}

// openDB loads the config of a database command and opens its store.
func openDB(ctx context.Context, cmd *ucli.Command) (*config.Config, *daemon.DB, error) {
	cfg, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.ValidateDB(); err != nil {
		return nil, nil, usage(err)
	}
	// The table's pgstore switches come from the config as the relay's do, so
	// that every command sees the table the same way; of the commands, only
	// migrate acts on them.
	db, err := daemon.OpenDB(ctx, cfg.DB, daemon.DBParams{Table: cfg.Table, MaxConns: 2,
		NotifyTrigger: cfg.NotifyTrigger, BatchLease: cfg.BatchLease, Columns: cfg.Columns})
	if err != nil {
		return nil, nil, err
	}
	return cfg, db, nil
}

func migrateCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "migrate",
		Usage: "create the outbox table and its indexes, or upgrade them",
		Description: "Idempotent, and safe to run from several processes at once.\n" +
			"PostgreSQL: --notify-trigger also installs a trigger that sends the NOTIFY on every INSERT, so\n" +
			"writers in any language wake relays that listen (notify or notify_trigger); --batch-lease also\n" +
			"creates the TABLE_lease table that relays with batch_lease need. Neither is ever removed.\n" +
			"PostgreSQL and MySQL: it also creates TABLE_relays, where ordered relays heartbeat (relay_id,\n" +
			"seen_until) to split the aggregates into slots; a relay creates it itself if it may.\n" +
			"--cdc then creates the publication of the table's inserts and the logical replication slot that\n" +
			"relays with source: cdc read (names: --cdc-slot, --cdc-publication), unless they exist; it refuses\n" +
			"with the fix when wal_level is not logical, the role lacks REPLICATION or no slot is free.\n" +
			"PostgreSQL only. The slot keeps log until a relay reads it: see docs/operations.md.\n" +
			"A table with a columns: mapping (its own layout) is left as it is; --cdc still makes its slot.",
		Flags: append([]ucli.Flag{configFlag(),
			&ucli.BoolFlag{Name: "cdc", Usage: "also create the publication and replication slot of source cdc (postgres only)"},
		}, settingFlags(migrateFlags...)...),
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			cfg, db, err := openDB(ctx, cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			if cmd.Bool("cdc") && db.Pool == nil {
				return usage(fmt.Errorf("--cdc: %w", errNotPostgres))
			}
			out := cmd.Root().Writer
			if len(cfg.Columns) > 0 { // a table of its own layout: adding the contract's columns would change it
				if _, err = fmt.Fprintf(out, "table %s has a columns: mapping: left as it is\n", termsafe.String(cfg.Table)); err != nil {
					return err
				}
			} else {
				if err := db.Store.Migrate(ctx); err != nil {
					return fmt.Errorf("migrate %s: %w", cfg.Table, err)
				}
				if _, err = fmt.Fprintf(out, "migrated table %s (%s)\n", termsafe.String(cfg.Table), db.Scheme); err != nil {
					return err
				}
			}
			if !cmd.Bool("cdc") {
				return nil
			}
			return setupCDC(ctx, out, cfg, db)
		},
	}
}

// statusFlags are the settings `outbox status` reads: the database ones,
// and which replication slot to show.
var statusFlags = append(slices.Clone(dbFlags), "source", "cdc_slot")

// statusJSON is the output of `outbox status --json`.
type statusJSON struct {
	Table                string  `json:"table"`
	Pending              int64   `json:"pending"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	Dead                 int64   `json:"dead"`
	SentLastMinute       int64   `json:"sent_last_minute"`
	SentLastHour         int64   `json:"sent_last_hour"`
	// OtherStatus counts rows whose status is NULL or not 0, 1 or 2, which
	// the relay leaves alone (see outbox.Stats.OtherStatus).
	OtherStatus int64 `json:"other_status"`
	// CDCSlot is the replication slot, when status shows one (see slotReader).
	CDCSlot *pgcdc.SlotState `json:"cdc_slot,omitempty"`
	// Relays are the ids of the live ordered relays of the table, in slot
	// order, when the store keeps a table of relays (outbox.RelayLister).
	Relays []string `json:"relays,omitempty"`
}

// statusSource is what `outbox status` reads: the table's stats, and the
// replication slot when slot is not nil.
type statusSource struct {
	table string
	store daemon.Store
	slot  func(context.Context) (*pgcdc.SlotState, error)
}

func statusCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "status",
		Usage: "show the outbox table's backlog: pending, oldest pending, dead, recently sent",
		Description: "Sent counts are kept only when the relay marks rows sent (not with --delete-sent).\n" +
			"\"other status\" counts rows whose status is NULL or not 0, 1 or 2 (written by another program):\n" +
			"the relay never publishes them, so look at them if it is not 0.\n" +
			"On PostgreSQL it shows the replication slot (cdc_slot) too: always with source: cdc, and with\n" +
			"source: polling when the slot exists (a slot nobody reads keeps write-ahead log).\n" +
			"PostgreSQL and MySQL: the live ordered relays of the table (relays), from TABLE_relays.\n" +
			"With --json, one JSON object: table, pending, oldest_pending_seconds, dead, sent_last_minute,\n" +
			"sent_last_hour, other_status, cdc_slot when it shows the slot, and relays when any is live; with --watch, one such line per interval (or, without --json, a table\n" +
			"under a \"--- time\" line).",
		Flags: append([]ucli.Flag{
			configFlag(),
			&ucli.BoolFlag{Name: "json", Usage: "print one JSON object instead of a table"},
			&ucli.BoolFlag{Name: "watch", Usage: "print the status again every --interval until Ctrl-C"},
			&ucli.DurationFlag{Name: "interval", Value: 2 * time.Second, Usage: "with --watch, wait `DURATION` between prints"},
		}, settingFlags(statusFlags...)...),
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			interval := cmd.Duration("interval")
			if interval <= 0 {
				return usage(fmt.Errorf("--interval: %v is not positive", interval))
			}
			cfg, db, err := openDB(ctx, cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			if err := refuseMapped(cfg, "status"); err != nil {
				return err
			}
			src := statusSource{table: cfg.Table, store: db.Store, slot: slotReader(cfg, db)}
			if !cmd.Bool("watch") {
				return printStatus(ctx, cmd, src)
			}
			return watchStatus(ctx, cmd, src, interval)
		},
	}
}

// watchReadTimeout is the least time status --watch gives one read of the
// stats (it gives the interval when that is longer).
const watchReadTimeout = 5 * time.Second

// watchStatus prints the status every interval until ctx is done, then
// returns nil. A failed read is reported on stderr and the watch goes on;
// a read that gets no answer within the interval (and at least
// watchReadTimeout) fails, so that a database that stopped answering shows
// as errors rather than a screen that is silently no longer updated.
func watchStatus(ctx context.Context, cmd *ucli.Command, src statusSource, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if !cmd.Bool("json") {
			fmt.Fprintf(cmd.Root().Writer, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
		}
		rctx, cancel := context.WithTimeout(ctx, max(interval, watchReadTimeout))
		err := printStatus(rctx, cmd, src)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintln(cmd.Root().ErrWriter, errorLine(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// printStatus prints the stats of src once (and its slot), as a table or
// (--json) one line of JSON.
func printStatus(ctx context.Context, cmd *ucli.Command, src statusSource) error {
	table := src.table
	st, err := src.store.Stats(ctx)
	if err != nil {
		return fmt.Errorf("read stats of %s: %w", table, err)
	}
	var slot *pgcdc.SlotState
	if src.slot != nil {
		if slot, err = src.slot(ctx); err != nil {
			return err
		}
	}
	var relays []string
	if l, ok := src.store.(outbox.RelayLister); ok {
		live, err := l.Relays(ctx)
		if err != nil {
			return fmt.Errorf("read the relays of %s: %w", table, err)
		}
		for _, r := range live {
			relays = append(relays, r.ID)
		}
	}
	out := cmd.Root().Writer
	if cmd.Bool("json") {
		enc := json.NewEncoder(termsafe.NewWriter(out))
		return enc.Encode(statusJSON{
			Table: table, Pending: st.Pending, OldestPendingSeconds: st.OldestPending.Seconds(),
			Dead: st.Dead, SentLastMinute: st.SentLastMinute, SentLastHour: st.SentLastHour,
			OtherStatus: st.OtherStatus, CDCSlot: slot, Relays: relays,
		})
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	oldest := "-"
	if st.Pending > 0 {
		oldest = st.OldestPending.Round(time.Millisecond).String()
	}
	fmt.Fprintf(tw, "table\t%s\n", termsafe.String(table))
	fmt.Fprintf(tw, "pending\t%d\n", st.Pending)
	fmt.Fprintf(tw, "oldest pending\t%s\n", oldest)
	fmt.Fprintf(tw, "dead\t%d\n", st.Dead)
	fmt.Fprintf(tw, "sent last minute\t%d\n", st.SentLastMinute)
	fmt.Fprintf(tw, "sent last hour\t%d\n", st.SentLastHour)
	fmt.Fprintf(tw, "other status\t%d\n", st.OtherStatus)
	if slot != nil {
		writeSlot(tw, *slot)
	}
	if len(relays) > 0 {
		fmt.Fprintf(tw, "live relays\t%d (%s)\n", len(relays), termsafe.String(strings.Join(relays, ", ")))
	}
	return tw.Flush()
}

func demoCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "demo",
		Usage: "replay the classic incident: naive commit-then-publish vs the outbox, broker down mid-run",
		Description: "With no flags it needs no server: SQLite in a temporary folder and an embedded NATS\n" +
			"JetStream. --db and --broker run it against a real PostgreSQL and NATS (fresh tables and\n" +
			"streams, removed at the end). The demo reads no OUTBOX_* variable.",
		Flags: []ucli.Flag{
			&ucli.IntFlag{Name: "orders", Value: demo.DefaultOrders, Usage: "how many orders to pay (`N`)"},
			&ucli.StringFlag{Name: "db", Usage: "PostgreSQL `URL` (postgres://...); empty = embedded SQLite"},
			&ucli.StringFlag{Name: "broker", Usage: "NATS `URL` (nats://host:port); empty = embedded NATS"},
			&ucli.DurationFlag{Name: "pay-time", Value: demo.DefaultPayTime, Usage: "how long paying every order takes (`DURATION`)"},
			&ucli.DurationFlag{Name: "outage-at", Usage: "when the broker goes dark, from the first payment (`DURATION`)",
				DefaultText: fmt.Sprintf("%g × pay time", demo.DefaultOutageAt)},
			&ucli.DurationFlag{Name: "outage-for", Usage: "how long the broker stays dark (`DURATION`)",
				DefaultText: fmt.Sprintf("%g × pay time", demo.DefaultOutageFor)},
			&ucli.FloatFlag{Name: "declines", Value: demo.DefaultDeclines, Usage: "fraction of payments the card processor declines (`F`); negative = none"},
			&ucli.Int64Flag{Name: "seed", Usage: "seed of the declines and arrival jitter (`N`); 0 = random"},
			&ucli.DurationFlag{Name: "drain-timeout", Value: demo.DefaultDrainTimeout, Usage: "longest wait for every path to deliver (`DURATION`)"},
			&ucli.BoolFlag{Name: "cdc", Usage: "PostgreSQL with wal_level = logical: the outbox relay reads the write-ahead log (source cdc) instead of polling"},
			&ucli.BoolFlag{Name: "quiet", Usage: "print only the final table"},
			&ucli.BoolFlag{Name: "verbose", Usage: "log what the services do (lost publishes, retries) to stderr"},
		},
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			cfg := demo.Config{
				Orders:       cmd.Int("orders"),
				DB:           cmd.String("db"),
				Broker:       cmd.String("broker"),
				PayTime:      cmd.Duration("pay-time"),
				OutageAt:     cmd.Duration("outage-at"),
				OutageFor:    cmd.Duration("outage-for"),
				Declines:     cmd.Float("declines"),
				Seed:         cmd.Int64("seed"),
				CDC:          cmd.Bool("cdc"),
				DrainTimeout: cmd.Duration("drain-timeout"),
				Quiet:        cmd.Bool("quiet"),
			}
			if cmd.Bool("verbose") {
				cfg.Logger = slog.New(slog.NewTextHandler(cmd.Root().ErrWriter, nil))
			}
			_, err := demo.Run(ctx, cfg, cmd.Root().Writer)
			return err
		},
	}
}
