package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	ucli "github.com/urfave/cli/v3"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/termsafe"
)

func init() { extraCommands = append(extraCommands, archiveCommand) }

// Defaults of `outbox archive`.
const (
	defaultArchiveBatch = 1000
	archiveProgress     = time.Second // at most one progress line this often
)

func archiveCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "archive",
		Usage: "move old sent rows to the archive table (or delete them), in small batches",
		Description: "Moves sent rows last updated at least --older-than ago into the table's archive table\n" +
			"(its name plus _archive, created on first use), --batch rows per short transaction, until\n" +
			"none are left; --delete deletes them instead. Safe to run while relays run. Ctrl-C stops it\n" +
			"after the batch in flight. `outbox relay` does the same on a schedule (--archive-every); this\n" +
			"command is for a one-off clean-up or a cron job when that schedule is off.",
		Flags: append(append([]ucli.Flag{configFlag()}, settingFlags(dbFlags...)...),
			&ucli.StringFlag{Name: "older-than", Required: true, Usage: "only rows sent at least `AGE` ago (90m, 36h, 7d; 0s = all)"},
			&ucli.IntFlag{Name: "batch", Value: defaultArchiveBatch, Usage: "move `N` rows per transaction"},
			&ucli.BoolFlag{Name: "delete", Usage: "delete the rows instead of archiving them"},
		),
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			age, err := parseAge(cmd.String("older-than"))
			if err != nil {
				return usage(fmt.Errorf("--older-than: %w", err))
			}
			p := outbox.ArchiveParams{OlderThan: age, Batch: cmd.Int("batch"), Delete: cmd.Bool("delete")}
			if p.Batch < 1 {
				return usage(fmt.Errorf("--batch: %d is less than 1", p.Batch))
			}
			cfg, db, admin, err := openAdmin(ctx, cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			dest := "deleted"
			if !p.Delete {
				dest = "archived"
				if a, ok := admin.(interface{ ArchiveTable() string }); ok {
					dest += " into " + termsafe.String(a.ArchiveTable())
				}
			}
			out := cmd.Root().Writer
			start := time.Now()
			total, batches, stopped, err := archiveAll(ctx, admin, p, out)
			if err != nil {
				return fmt.Errorf("archive %s (%d rows done): %w", cfg.Table, total, err)
			}
			if stopped {
				dest += "; stopped early"
			}
			took := time.Since(start)
			unit := "batches"
			if batches == 1 {
				unit = "batch"
			}
			_, err = fmt.Fprintf(out, "%d %s %s in %d %s, %s (%.0f rows/s)\n", total, plural(int(total), "row"), dest,
				batches, unit, took.Round(time.Millisecond), float64(total)/max(took.Seconds(), 1e-3))
			return err
		},
	}
}

// archiveAll calls Archive until it returns 0 or ctx is done, printing a
// progress line to out at most once a second. stopped says ctx ended it.
func archiveAll(ctx context.Context, admin outbox.Admin, p outbox.ArchiveParams, out io.Writer) (total int64, batches int, stopped bool, err error) {
	start := time.Now()
	last := start
	for {
		if ctx.Err() != nil {
			return total, batches, true, nil
		}
		n, err := admin.Archive(ctx, p)
		if err != nil {
			if ctx.Err() != nil {
				return total, batches, true, nil
			}
			return total, batches, false, err
		}
		if n == 0 {
			return total, batches, false, nil
		}
		total += n
		batches++
		if now := time.Now(); now.Sub(last) >= archiveProgress {
			last = now
			rate := float64(total) / now.Sub(start).Seconds()
			fmt.Fprintf(out, "%d rows so far, %.0f rows/s\n", total, rate)
		}
	}
}
