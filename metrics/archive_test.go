package metrics_test

import (
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/outbox/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestArchiveSeries(t *testing.T) {
	t.Parallel()
	type step struct {
		batch int64 // rows of a committed batch, or 0
		run   error // the end of a run: nil ok, else error
		end   bool  // the step ends a run
	}
	for _, tc := range []struct {
		name     string
		deleted  bool
		steps    []step
		rows     float64 // outbox_archived_total of the mode
		ok, errs float64 // outbox_archive_runs_total by result
	}{
		{name: "NothingYet"},
		{name: "MovedInTwoRuns", steps: []step{{batch: 1000}, {batch: 200}, {end: true}, {batch: 7}, {end: true}},
			rows: 1207, ok: 2},
		{name: "Deleted", deleted: true, steps: []step{{batch: 5}, {end: true}}, rows: 5, ok: 1},
		{name: "FailedRun", steps: []step{{batch: 1000}, {end: true, run: errors.New("permission denied")}, {end: true}},
			rows: 1000, ok: 1, errs: 1},
		{name: "EmptyBatchIsNoProgress", steps: []step{{batch: 0}, {end: true, run: errors.New("x")}}, errs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewPedanticRegistry()
			m, err := metrics.NewMetrics(reg, metrics.WithRelayName("r"))
			require.NoError(t, err)
			require.Nil(t, series(t, reg, "outbox_archive_runs_total", nil), "no archive series before StartArchive")
			require.Nil(t, series(t, reg, "outbox_archive_interval_seconds", nil))

			before := time.Now()
			m.StartArchive(90*time.Minute, tc.deleted)
			started := value(t, reg, "outbox_archive_last_success_timestamp_seconds", nil)
			require.InDelta(t, float64(before.UnixNano())/1e9, started, 1, "the start time until a success")
			require.Equal(t, 5400.0, value(t, reg, "outbox_archive_interval_seconds", nil))

			lastProgress := started
			for _, s := range tc.steps {
				time.Sleep(2 * time.Millisecond) // so that a new timestamp is a later one
				if s.end {
					m.OnArchiveRun(s.run)
				} else {
					m.OnArchiveBatch(s.batch, tc.deleted)
				}
				got := value(t, reg, "outbox_archive_last_success_timestamp_seconds", nil)
				if (s.end && s.run == nil) || s.batch > 0 {
					require.Greater(t, got, lastProgress, "progress moves the last-success time")
					lastProgress = got
				} else {
					require.Equal(t, lastProgress, got, "no progress, no new last-success time")
				}
			}

			mode, other := metrics.ArchiveModeMove, metrics.ArchiveModeDelete
			if tc.deleted {
				mode, other = other, mode
			}
			require.Equal(t, tc.rows, value(t, reg, "outbox_archived_total", map[string]string{"relay": "r", "mode": mode}))
			require.Nil(t, series(t, reg, "outbox_archived_total", map[string]string{"mode": other}),
				"only the configured mode has a series")
			require.Equal(t, tc.ok, value(t, reg, "outbox_archive_runs_total", map[string]string{"result": metrics.ArchiveResultOK}))
			require.Equal(t, tc.errs, value(t, reg, "outbox_archive_runs_total", map[string]string{"result": metrics.ArchiveResultError}))
		})
	}
}
