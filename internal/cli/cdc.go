package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v3"

	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/daemon"
	"github.com/outboxkit/outbox/internal/termsafe"
	"github.com/outboxkit/outbox/store/pgcdc"
)

func init() { extraCommands = append(extraCommands, cdcCommand) }

// cdcFlags are the settings the cdc commands read.
var cdcFlags = append(slices.Clone(dbFlags), "cdc_slot", "cdc_publication")

// errNotPostgres refuses a CDC action on another database.
var errNotPostgres = errors.New("CDC is for PostgreSQL only: MySQL and MariaDB stay on polling (see docs/operations.md)")

// stopStreamingTimeout bounds the wait for a slot's stream to end (drop-slot --force).
const stopStreamingTimeout = 10 * time.Second

func cdcCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "cdc",
		Usage: "look at or drop the PostgreSQL replication slot of source cdc",
		Description: "The slot is created by outbox migrate --cdc. It keeps every byte of write-ahead log that no\n" +
			"relay has read: see the CDC section of docs/operations.md.",
		Commands: []*ucli.Command{cdcStatusCommand(), cdcDropSlotCommand()},
	}
}

// withCDC is the action of a cdc command: it opens the database, refusing
// any but PostgreSQL, runs act and closes the database.
func withCDC(act func(context.Context, *ucli.Command, *config.Config, *daemon.DB) error) ucli.ActionFunc {
	return func(ctx context.Context, cmd *ucli.Command) error {
		cfg, db, err := openDB(ctx, cmd)
		if err != nil {
			return err
		}
		defer db.Close()
		if db.Pool == nil {
			return usage(errNotPostgres)
		}
		return act(ctx, cmd, cfg, db)
	}
}

func cdcStatusCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "status",
		Usage: "show the replication slot: active, lag in bytes, wal_status",
		Description: "With --json, one JSON object: name, exists, active, active_pid, wal_status, lag_bytes,\n" +
			"safe_wal_size_bytes (null when max_slot_wal_keep_size is -1: no limit).",
		Flags: append([]ucli.Flag{configFlag(),
			&ucli.BoolFlag{Name: "json", Usage: "print one JSON object instead of a table"},
		}, settingFlags(cdcFlags...)...),
		Action: withCDC(showSlot),
	}
}

// showSlot is the action of `outbox cdc status`.
func showSlot(ctx context.Context, cmd *ucli.Command, cfg *config.Config, db *daemon.DB) error {
	st, err := pgcdc.SlotStatus(ctx, db.Pool, cfg.CDCSlotName())
	if err != nil {
		return err
	}
	out := cmd.Root().Writer
	if cmd.Bool("json") {
		return json.NewEncoder(termsafe.NewWriter(out)).Encode(st)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	writeSlot(tw, st)
	return tw.Flush()
}

func cdcDropSlotCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "drop-slot",
		Usage: "drop the replication slot (decommissioning CDC), and with --drop-publication its publication",
		Description: "Asks for confirmation on stdin unless --yes; with stdin not a terminal it refuses instead.\n" +
			"It refuses a slot that a process streams (a running CDC relay) unless --force, which ends that\n" +
			"stream first (pg_terminate_backend); a relay still running would take the slot again, so stop the\n" +
			"relays first: a relay with source cdc whose slot is gone polls the table, and creates the slot again.\n" +
			"The log the slot kept is freed at the server's next checkpoint.",
		Flags: append([]ucli.Flag{configFlag(),
			&ucli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation"},
			&ucli.BoolFlag{Name: "force", Usage: "end the stream of a slot that a process reads, then drop it"},
			&ucli.BoolFlag{Name: "drop-publication", Usage: "drop the publication (cdc_publication) too"},
		}, settingFlags(cdcFlags...)...),
		Action: withCDC(dropSlot),
	}
}

// dropSlot is the action of `outbox cdc drop-slot`.
func dropSlot(ctx context.Context, cmd *ucli.Command, cfg *config.Config, db *daemon.DB) error {
	out := cmd.Root().Writer
	slot, pub := cfg.CDCSlotName(), ""
	if cmd.Bool("drop-publication") {
		pub = cfg.CDCPublicationName()
	}
	st, err := pgcdc.SlotStatus(ctx, db.Pool, slot)
	if err != nil {
		return err
	}
	if !st.Exists {
		fmt.Fprintf(out, "no replication slot %s; nothing dropped\n", termsafe.String(slot))
		return nil
	}
	if st.Active && !cmd.Bool("force") {
		return fmt.Errorf("%w: %s is streamed by server process %d: stop the relay that reads it, or pass --force to end the stream",
			pgcdc.ErrSlotActive, slot, st.ActivePID)
	}
	if !cmd.Bool("yes") {
		q := fmt.Sprintf("drop replication slot %s (lag %s)", termsafe.String(slot), lagText(st))
		if pub != "" {
			q += " and publication " + termsafe.String(pub)
		}
		if st.Active {
			q += ", ending the stream of server process " + fmt.Sprint(st.ActivePID)
		}
		ok, err := confirm(cmd, q+"?")
		if err != nil {
			return err
		}
		if !ok {
			_, err := fmt.Fprintln(out, "not confirmed; nothing changed")
			return err
		}
	}
	if st.Active {
		sctx, cancel := context.WithTimeout(ctx, stopStreamingTimeout)
		_, err := pgcdc.StopStreaming(sctx, db.Pool, slot)
		cancel()
		if err != nil {
			return err
		}
	}
	if err := pgcdc.DropSlot(ctx, db.Pool, slot, pub); err != nil {
		if errors.Is(err, pgcdc.ErrSlotActive) {
			return fmt.Errorf("%w; is a relay with source cdc still running? stop it first", err)
		}
		return err
	}
	fmt.Fprintf(out, "dropped replication slot %s\n", termsafe.String(slot))
	if pub != "" {
		fmt.Fprintf(out, "dropped publication %s\n", termsafe.String(pub))
	}
	return nil
}

// setupCDC is what `outbox migrate --cdc` does after the migration: the
// publication and the slot (pgcdc.Setup), reported on out.
func setupCDC(ctx context.Context, out io.Writer, cfg *config.Config, db *daemon.DB) error {
	slot, pub := cfg.CDCSlotName(), cfg.CDCPublicationName()
	res, err := pgcdc.Setup(ctx, db.Pool, cfg.Table, slot, pub)
	if err != nil {
		return fmt.Errorf("set up cdc on %s: %w", cfg.Table, err)
	}
	table := termsafe.String(cfg.Table)
	if res.CreatedPublication {
		fmt.Fprintf(out, "created publication %s (inserts of %s)\n", termsafe.String(pub), table)
	} else {
		fmt.Fprintf(out, "publication %s (inserts of %s) exists\n", termsafe.String(pub), table)
	}
	if res.CreatedSlot {
		fmt.Fprintf(out, "created replication slot %s (pgoutput) at %s\n", slot, res.LSN)
	} else {
		fmt.Fprintf(out, "replication slot %s exists\n", slot)
	}
	if res.CreatedMarkTable {
		fmt.Fprintf(out, "created table %s (each slot's mark of first attempts)\n", pgcdc.MarkTable)
	}
	_, err = fmt.Fprintf(out, "the slot keeps write-ahead log until a relay with source: cdc reads it; "+
		"remove it with outbox cdc drop-slot if none will\n")
	return err
}

// slotReader reads the slot that `outbox status` shows, or nil when it
// shows none: the slot of source cdc, whether it exists or not, or with
// source polling the slot of that name when it exists.
func slotReader(cfg *config.Config, db *daemon.DB) func(context.Context) (*pgcdc.SlotState, error) {
	if db.Pool == nil {
		return nil
	}
	return func(ctx context.Context) (*pgcdc.SlotState, error) {
		st, err := pgcdc.SlotStatus(ctx, db.Pool, cfg.CDCSlotName())
		if err != nil {
			return nil, err
		}
		if !st.Exists && cfg.Source != config.SourceCDC {
			return nil, nil
		}
		return &st, nil
	}
}

// writeSlot writes the rows of a slot's status to tw.
func writeSlot(tw io.Writer, st pgcdc.SlotState) {
	fmt.Fprintf(tw, "cdc slot\t%s\n", termsafe.String(st.Slot))
	if !st.Exists {
		fmt.Fprintf(tw, "slot exists\tno: run outbox migrate --cdc\n")
		return
	}
	active := "no"
	if st.Active {
		active = fmt.Sprintf("yes (server process %d)", st.ActivePID)
	}
	fmt.Fprintf(tw, "slot active\t%s\n", active)
	fmt.Fprintf(tw, "slot lag\t%s\n", lagText(st))
	fmt.Fprintf(tw, "slot wal status\t%s\n", st.WALStatus)
	safe := "no limit (max_slot_wal_keep_size = -1)"
	switch {
	case st.WALStatus == pgcdc.WALLost:
		safe = "none: the slot is lost"
	case st.SafeWALSize != nil:
		safe = bytesText(*st.SafeWALSize)
	}
	fmt.Fprintf(tw, "slot safe wal size\t%s\n", safe)
}

// lagText is a slot's lag in words.
func lagText(st pgcdc.SlotState) string {
	if st.LagBytes == nil {
		return "unknown"
	}
	return bytesText(*st.LagBytes)
}

// bytesText is n bytes, exactly and in binary units.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n), -1
	for v >= unit && u < 3 {
		v /= unit
		u++
	}
	return fmt.Sprintf("%.1f %ciB (%d bytes)", v, "KMGT"[u], n)
}
