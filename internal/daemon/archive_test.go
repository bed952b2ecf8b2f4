package daemon

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/pgstore"
)

// archiveDB is a migrated outbox table of a test's own on one database, with
// what an archive test needs to write messages and to read and change rows
// behind the relay's back.
type archiveDB struct {
	url     config.Secret
	archive string // the archive table's name
	// write commits n messages of event type ev through the store's Writer.
	write func(t *testing.T, ev string, n int) []*outbox.Message
	// exec runs a statement and returns the rows it changed; count runs a
	// SELECT count(*). In both, {T} is the table, {A} the archive table,
	// {AGO} a time ten days ago and {LATER} a time one day ahead, in the
	// database's own SQL.
	exec  func(t *testing.T, query string) int64
	count func(t *testing.T, query string) int
}

// archiveDBs open an archiveDB on each database.
var archiveDBs = []struct {
	name string
	open func(t *testing.T) *archiveDB
}{
	{"PostgreSQL", pgArchiveDB},
	{"MySQL", mysqlArchiveDB},
	{"SQLite", sqliteArchiveDB},
}

func pgArchiveDB(t *testing.T) *archiveDB {
	pool, _, dsn := testsvc.PostgresSchema(t)
	ctx := context.Background()
	s, err := pgstore.New(pool)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	sqlText := strings.NewReplacer("{T}", config.DefaultTable, "{A}", s.ArchiveTable(),
		"{AGO}", "now() - interval '10 days'", "{LATER}", "now() + interval '1 day'").Replace
	w := outbox.NewWriter(s)
	return &archiveDB{
		url: config.NewSecret(dsn), archive: s.ArchiveTable(),
		write: func(t *testing.T, ev string, n int) []*outbox.Message {
			msgs := newMessages(ev, n)
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, w.Write(ctx, tx, msgs...))
			require.NoError(t, tx.Commit(ctx))
			return msgs
		},
		exec: func(t *testing.T, q string) int64 {
			tag, err := pool.Exec(ctx, sqlText(q))
			require.NoError(t, err, q)
			return tag.RowsAffected()
		},
		count: func(t *testing.T, q string) int {
			var n int
			require.NoError(t, pool.QueryRow(ctx, sqlText(q)).Scan(&n), q)
			return n
		},
	}
}

func mysqlArchiveDB(t *testing.T) *archiveDB {
	db, dsn := testsvc.MySQLDatabase(t)
	s, err := mysqlstore.New(db)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	return sqlArchiveDB(config.NewSecret(mysqlURL(t, dsn)), db, s, s.ArchiveTable(), "UTC_TIMESTAMP(6) - INTERVAL 10 DAY",
		"UTC_TIMESTAMP(6) + INTERVAL 1 DAY")
}

func sqliteArchiveDB(t *testing.T) *archiveDB {
	url, db, s := sqliteDB(t)
	return sqlArchiveDB(url, db, s, s.ArchiveTable(), "strftime('%Y-%m-%d %H:%M:%f', 'now', '-10 days')",
		"strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 day')")
}

func sqlArchiveDB(url config.Secret, db *sql.DB, s outbox.TxInserter[*sql.Tx], archive, ago, later string) *archiveDB {
	ctx := context.Background()
	sqlText := strings.NewReplacer("{T}", config.DefaultTable, "{A}", archive, "{AGO}", ago, "{LATER}", later).Replace
	w := outbox.NewWriter[*sql.Tx](s)
	return &archiveDB{
		url: url, archive: archive,
		write: func(t *testing.T, ev string, n int) []*outbox.Message {
			msgs := newMessages(ev, n)
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, w.Write(ctx, tx, msgs...))
			require.NoError(t, tx.Commit())
			return msgs
		},
		exec: func(t *testing.T, q string) int64 {
			res, err := db.ExecContext(ctx, sqlText(q))
			require.NoError(t, err, q)
			n, err := res.RowsAffected()
			require.NoError(t, err)
			return n
		},
		count: func(t *testing.T, q string) int {
			var n int
			require.NoError(t, db.QueryRowContext(ctx, sqlText(q)).Scan(&n), q)
			return n
		},
	}
}

func newMessages(ev string, n int) []*outbox.Message {
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i), EventType: ev,
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return msgs
}

// ageRows gives db old rows of three kinds, each under its own event type:
// sent (the archive's business), dead, and pending but waiting out a backoff
// (both must stay): OLD_SENT, OLD_DEAD and OLD_WAITING.
func ageRows(t *testing.T, db *archiveDB, sent, dead, waiting int) {
	t.Helper()
	for ev, n := range map[string]int{"OLD_SENT": sent, "OLD_DEAD": dead, "OLD_WAITING": waiting} {
		if n > 0 {
			db.write(t, ev, n)
		}
	}
	require.EqualValues(t, sent, db.exec(t, "UPDATE {T} SET status = 1, updated_at = {AGO} WHERE event_type = 'OLD_SENT'"))
	require.EqualValues(t, dead, db.exec(t,
		"UPDATE {T} SET status = 2, retry_count = 5, updated_at = {AGO} WHERE event_type = 'OLD_DEAD'"))
	require.EqualValues(t, waiting, db.exec(t,
		"UPDATE {T} SET retry_count = 1, next_retry_at = {LATER}, updated_at = {AGO} WHERE event_type = 'OLD_WAITING'"))
}

// metricValue reads one sample of the daemon's /metrics, or -1 when absent.
func metricValue(t *testing.T, d *Daemon, sample string) float64 {
	t.Helper()
	res, err := http.Get(d.HTTPURL() + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return v
}

// TestScheduledArchiveWhileRelaying runs the daemon with a short
// archive_every on each database: old sent rows leave the table in batches,
// run after run, while the relay publishes what is written meanwhile; dead
// rows, pending rows and recent sent rows stay.
func TestScheduledArchiveWhileRelaying(t *testing.T) {
	t.Parallel()
	type tc struct {
		name    string
		open    func(t *testing.T) *archiveDB
		deleted bool
	}
	var cases []tc
	for _, db := range archiveDBs {
		cases = append(cases, tc{db.name, db.open, false})
	}
	cases = append(cases, tc{"PostgreSQLDelete", pgArchiveDB, true}, tc{"SQLiteDelete", sqliteArchiveDB, true})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := tc.open(t)
			stream := newNATSStream(t)
			const sent, dead, waiting, fresh = 23, 3, 2, 10
			ageRows(t, db, sent, dead, waiting)

			cfg := baseConfig(db.url, stream.broker("events"))
			cfg.HTTP = "127.0.0.1:0"
			cfg.ArchiveEvery = 100 * time.Millisecond
			cfg.ArchiveOlderThan = time.Hour
			cfg.ArchiveBatch = 7 // 23 rows: four batches in a run
			cfg.ArchiveDelete = tc.deleted
			cfg.Ordering = false // the rows share an aggregate: its old dead rows would hold back the new ones
			d, logs, stop := startLogged(t, cfg)

			mode := "move"
			if tc.deleted {
				mode = "delete"
			}
			archived := func() float64 {
				return metricValue(t, d, fmt.Sprintf(`outbox_archived_total{mode=%q,relay="default"}`, mode))
			}
			inArchive := func() int {
				if tc.deleted {
					return 0
				}
				return db.count(t, "SELECT count(*) FROM {A}")
			}

			// Messages written while the daemon runs go out.
			db.write(t, "NEW", fresh)
			testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == fresh },
				"the messages written meanwhile are published")
			testsvc.Eventually(t, 20*time.Second, func() bool {
				return db.count(t, "SELECT count(*) FROM {T} WHERE event_type = 'OLD_SENT'") == 0
			}, "the old sent rows leave the table")
			// The counter moves just after the commit the table shows.
			testsvc.Eventually(t, 5*time.Second, func() bool { return archived() == sent }, "%s rows counted", mode)
			if !tc.deleted {
				require.Equal(t, sent, db.count(t, "SELECT count(*) FROM {A} WHERE event_type = 'OLD_SENT' AND status = 1"),
					"every old sent row is in the archive table, once")
			}

			// What must stay, stays: dead rows, pending rows (however old) and
			// recently sent ones.
			testsvc.Eventually(t, 10*time.Second, func() bool {
				return db.count(t, "SELECT count(*) FROM {T} WHERE event_type = 'NEW' AND status = 1") == fresh
			}, "the new messages are acknowledged")
			// Give the archive two more runs in which to be wrong.
			runs := metricValue(t, d, `outbox_archive_runs_total{relay="default",result="ok"}`)
			testsvc.Eventually(t, 20*time.Second, func() bool {
				return metricValue(t, d, `outbox_archive_runs_total{relay="default",result="ok"}`) >= runs+2
			}, "two more archive runs")
			require.Equal(t, dead, db.count(t, "SELECT count(*) FROM {T} WHERE event_type = 'OLD_DEAD' AND status = 2"))
			require.Equal(t, waiting, db.count(t, "SELECT count(*) FROM {T} WHERE event_type = 'OLD_WAITING' AND status = 0"))
			require.Equal(t, fresh, db.count(t, "SELECT count(*) FROM {T} WHERE event_type = 'NEW' AND status = 1"))
			if !tc.deleted {
				require.Equal(t, sent, inArchive(), "the archive took nothing else")
			}

			// The schedule repeats: rows that grow old later go at a later run.
			require.EqualValues(t, fresh, db.exec(t, "UPDATE {T} SET updated_at = {AGO} WHERE event_type = 'NEW'"))
			testsvc.Eventually(t, 20*time.Second, func() bool {
				return db.count(t, "SELECT count(*) FROM {T} WHERE event_type = 'NEW'") == 0
			}, "a later run takes the rows that aged since")
			testsvc.Eventually(t, 5*time.Second, func() bool { return archived() == sent+fresh }, "%s rows counted", mode)
			if !tc.deleted {
				require.Equal(t, sent+fresh, inArchive())
			}
			require.Equal(t, dead+waiting, db.count(t, "SELECT count(*) FROM {T}"), "only the dead and pending rows are left")

			require.GreaterOrEqual(t, metricValue(t, d, `outbox_archive_runs_total{relay="default",result="ok"}`), 2.0)
			require.Zero(t, metricValue(t, d, `outbox_archive_runs_total{relay="default",result="error"}`))
			require.Equal(t, 0.1, metricValue(t, d, `outbox_archive_interval_seconds{relay="default"}`))
			require.InDelta(t, float64(time.Now().Unix()), metricValue(t, d, `outbox_archive_last_success_timestamp_seconds{relay="default"}`), 5)
			require.NoError(t, stop())

			out := logs.String()
			require.Contains(t, out, `"msg":"archive scheduled"`)
			require.Contains(t, out, fmt.Sprintf(`"mode":%q`, mode))
			require.Regexp(t, `"msg":"archive run done".*"rows":23,"batches":4,"duration":[1-9]`, out,
				"a summary line per run, with rows, batches and time")
			require.NotContains(t, out, "archive run failed")
			if tc.deleted {
				require.NotContains(t, out, `"archive_table"`)
			} else {
				require.Contains(t, out, fmt.Sprintf(`"archive_table":%q`, db.archive))
			}
		})
	}
}

// TestScheduledArchiveErrorsSpareTheRelay makes every archive run fail (the
// archive table's name is taken by a view), then mends it: the relay
// publishes throughout, each failure is logged and counted, and the next
// run after the mend archives.
func TestScheduledArchiveErrorsSpareTheRelay(t *testing.T) {
	t.Parallel()
	for _, tc := range archiveDBs {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := tc.open(t)
			stream := newNATSStream(t)
			ageRows(t, db, 5, 0, 0)
			db.exec(t, "CREATE VIEW {A} AS SELECT 1 AS id")

			cfg := baseConfig(db.url, stream.broker("events"))
			cfg.HTTP = "127.0.0.1:0"
			cfg.ArchiveEvery = 50 * time.Millisecond
			cfg.ArchiveOlderThan = time.Hour
			d, logs, stop := startLogged(t, cfg)
			failed := func() float64 {
				return metricValue(t, d, `outbox_archive_runs_total{relay="default",result="error"}`)
			}
			testsvc.Eventually(t, 20*time.Second, func() bool { return failed() >= 2 }, "archive runs fail")
			require.Zero(t, metricValue(t, d, `outbox_archive_runs_total{relay="default",result="ok"}`))
			require.Contains(t, logs.String(), `"msg":"archive run failed, will retry"`)

			db.write(t, "NEW", 4)
			testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == 4 },
				"the relay publishes while the archive fails")
			require.Equal(t, 5, db.count(t, "SELECT count(*) FROM {T} WHERE event_type = 'OLD_SENT'"), "nothing moved")

			db.exec(t, "DROP VIEW {A}")
			testsvc.Eventually(t, 20*time.Second, func() bool {
				return db.count(t, "SELECT count(*) FROM {T} WHERE event_type = 'OLD_SENT'") == 0
			}, "the next run after the mend archives")
			require.Equal(t, 5, db.count(t, "SELECT count(*) FROM {A}"))
			// The run is counted when it ends, after its last batch committed.
			testsvc.Eventually(t, 5*time.Second, func() bool {
				return metricValue(t, d, `outbox_archive_runs_total{relay="default",result="ok"}`) >= 1
			}, "the successful run is not counted")
			require.Equal(t, 1.0, metricValue(t, d, `outbox_relay_up{relay="default"}`), "the relay never stopped")
			require.NoError(t, stop())
		})
	}
}

// TestScheduledArchiveStopsPromptly stops the daemon in the middle of a long
// archive run: Run returns at once, and every row is either in the table or
// in the archive table, once.
func TestScheduledArchiveStopsPromptly(t *testing.T) {
	t.Parallel()
	db := sqliteArchiveDB(t)
	stream := newNATSStream(t)
	const total = 3000
	ageRows(t, db, total, 0, 0)
	cfg := baseConfig(db.url, stream.broker("events"))
	cfg.ArchiveEvery = 10 * time.Millisecond
	cfg.ArchiveOlderThan = time.Hour
	cfg.ArchiveBatch = 3 // a thousand batches, each followed by a rest of at least 10 ms
	_, logs, stop := startLogged(t, cfg)
	testsvc.Eventually(t, 20*time.Second, func() bool { return db.count(t, "SELECT count(*) FROM {T}") < total },
		"the run started")

	start := time.Now()
	require.NoError(t, stop())
	require.Less(t, time.Since(start), 2*time.Second, "the run does not hold the shutdown up")
	moved := db.count(t, "SELECT count(*) FROM {A}")
	require.Less(t, moved, total, "stopped mid-run")
	require.Equal(t, total-moved, db.count(t, "SELECT count(*) FROM {T}"), "each row in one table, once")
	require.Equal(t, total, db.count(t, "SELECT count(DISTINCT message_id) FROM (SELECT message_id FROM {T} UNION ALL SELECT message_id FROM {A})"))
	require.Contains(t, logs.String(), `"msg":"archive run stopped by shutdown"`)
}

// TestScheduledArchiveOff: archive_every 0, and delete_sent, schedule
// nothing (and create no archive table); delete_sent says why in the log.
func TestScheduledArchiveOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(c *config.Config)
		log    string
	}{
		{"Zero", func(c *config.Config) { c.ArchiveEvery = 0 }, ""},
		{"DeleteSent", func(c *config.Config) { c.DeleteSent = true }, "archive not scheduled: delete_sent leaves no sent rows to archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := sqliteArchiveDB(t)
			stream := newNATSStream(t)
			ageRows(t, db, 4, 0, 0)
			cfg := baseConfig(db.url, stream.broker("events"))
			cfg.ArchiveEvery = 10 * time.Millisecond
			cfg.ArchiveOlderThan = 0
			tc.change(cfg)
			cfg.HTTP = "127.0.0.1:0"
			d, logs, stop := startLogged(t, cfg)
			db.write(t, "NEW", 2)
			testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == 2 }, "published")
			time.Sleep(100 * time.Millisecond) // ten periods in which an archive would have run
			require.Equal(t, -1.0, metricValue(t, d, `outbox_archive_runs_total{relay="default",result="ok"}`),
				"no archive series")
			require.NoError(t, stop())
			require.Equal(t, 4, db.count(t, "SELECT count(*) FROM {T} WHERE event_type = 'OLD_SENT'"))
			require.Zero(t, db.count(t, "SELECT count(*) FROM sqlite_master WHERE name = '"+db.archive+"'"),
				"no archive table")
			out := logs.String()
			require.NotContains(t, out, `"msg":"archive scheduled"`)
			if tc.log != "" {
				require.Contains(t, out, tc.log)
			}
		})
	}
}
