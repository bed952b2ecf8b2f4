package inbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Purge deletes the consumer's inbox rows older than the retention
// (WithRetention), in statements of at most WithPurgeBatchSize rows each, so
// that it never holds many locks or a long transaction. It returns how many
// rows it deleted; on an error or a cancelled ctx it stops and returns what
// it deleted so far with the error. Safe to run from several processes.
func (in *Inbox) Purge(ctx context.Context) (int64, error) {
	cutoff := in.dialect.timeValue(in.cfg.now().Add(-in.cfg.retention))
	var total int64
	for {
		res, err := in.db.ExecContext(ctx, in.q.purge, in.cfg.consumer, cutoff, in.cfg.purgeBatch)
		if err != nil {
			return total, fmt.Errorf("inbox: purge: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("inbox: purge: %w", err)
		}
		total += n
		if n < int64(in.cfg.purgeBatch) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("inbox: purge: %w", err)
		}
	}
}

// RunPurge calls Purge every interval until ctx is cancelled, then returns
// nil. Purge errors are logged and retried at the next interval.
func (in *Inbox) RunPurge(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("inbox: run purge: interval %v is not positive", interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := in.Purge(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			in.log.LogAttrs(ctx, slog.LevelWarn, "inbox purge failed", slog.String(attrError, err.Error()),
				slog.Int64("deleted", n))
		case n > 0:
			in.log.LogAttrs(ctx, slog.LevelInfo, "inbox purged", slog.Int64("deleted", n))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
