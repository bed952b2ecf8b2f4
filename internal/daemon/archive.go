package daemon

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/metrics"
)

// Pacing of the scheduled archive.
const (
	// archiveFirstDelay is the most the first run waits after the start: a
	// daemon that restarts often still archives, and a deploy's first
	// minute, when the relays catch up, is left to them.
	archiveFirstDelay = time.Minute
	// minArchivePause and maxArchivePause bound the rest between two
	// batches of a run. The rest is as long as the batch took, so a run
	// keeps one connection busy at most about half the time however slow
	// the database is, and never waits long between batches.
	minArchivePause = 10 * time.Millisecond
	maxArchivePause = time.Second
	// archiveCallTimeout bounds one Archive call (at most 10,000 rows, or
	// the archive table's creation): a call stuck behind a lock would hold
	// one of the pool's connections for good; this one fails the run, which
	// the next period retries.
	archiveCallTimeout = time.Minute
)

// archiver runs Admin.Archive on a schedule while the relays run: the
// daemon's archive_every. It runs in its own goroutine; an error ends a run,
// never the daemon.
type archiver struct {
	admin outbox.Admin
	p     outbox.ArchiveParams
	every time.Duration
	first time.Duration
	dest  string            // where the rows go, for the log: the archive table, or "" when deleted
	log   *slog.Logger      // with component=archive
	m     *metrics.Metrics  // nil without an HTTP server
	scrub func(error) error // hides the config's secrets in a logged error
}

// archiveRun is the outcome of one run.
type archiveRun struct {
	rows    int64
	batches int
	took    time.Duration
	stopped bool  // ctx ended the run
	err     error // what cut it short, when not ctx
}

// run waits first, then runs an archive every period (measured from the
// end of the previous run) until ctx is done, and returns nil.
func (a *archiver) run(ctx context.Context) error {
	t := time.NewTimer(a.first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		r := a.once(ctx)
		a.report(ctx, r)
		if r.stopped {
			return nil
		}
		t.Reset(a.every)
	}
}

// once calls Archive until a call takes fewer rows than a batch (the rows
// old enough are gone, or the rest are locked by someone else and wait for
// the next run), resting between batches.
func (a *archiver) once(ctx context.Context) (r archiveRun) {
	start := time.Now()
	defer func() { r.took = time.Since(start) }()
	rest := time.NewTimer(maxArchivePause)
	rest.Stop() // armed by Reset after each full batch
	for {
		bstart := time.Now()
		cctx, cancel := context.WithTimeout(ctx, archiveCallTimeout)
		n, err := a.admin.Archive(cctx, a.p)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				r.stopped = true // shutting down: the batch rolled back, nothing is lost
			} else {
				r.err = err
			}
			return r
		}
		if n > 0 {
			r.rows += n
			r.batches++
			if a.m != nil {
				a.m.OnArchiveBatch(n, a.p.Delete)
			}
		}
		if n < int64(a.p.Batch) {
			return r
		}
		rest.Reset(min(max(time.Since(bstart), minArchivePause), maxArchivePause))
		select {
		case <-ctx.Done():
			r.stopped = true
			return r
		case <-rest.C:
		}
	}
}

// report logs a run's summary line and counts it.
func (a *archiver) report(ctx context.Context, r archiveRun) {
	mode := metrics.ArchiveModeMove
	if a.p.Delete {
		mode = metrics.ArchiveModeDelete
	}
	attrs := []slog.Attr{slog.String("mode", mode), slog.Int64("rows", r.rows), slog.Int("batches", r.batches),
		slog.Duration("duration", r.took)}
	if a.dest != "" {
		attrs = append(attrs, slog.String("archive_table", a.dest))
	}
	switch {
	case r.stopped:
		a.log.LogAttrs(ctx, slog.LevelInfo, "archive run stopped by shutdown", attrs...)
		return
	case r.err != nil:
		// Warn, not Error: the relays are unaffected and the next period retries.
		attrs = append(attrs, slog.String("error", a.scrub(r.err).Error()), slog.Duration("next_in", a.every))
		a.log.LogAttrs(ctx, slog.LevelWarn, "archive run failed, will retry", attrs...)
	default:
		a.log.LogAttrs(ctx, slog.LevelInfo, "archive run done", attrs...)
	}
	if a.m != nil {
		a.m.OnArchiveRun(r.err)
	}
}

// errNoAdmin is returned by Run when archiving is scheduled on a store
// without admin operations (every store of this module has them).
var errNoAdmin = errors.New("archive_every: the store has no archive operation; set archive_every: 0")
