package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testsvc"
)

// pgRelay is `outbox relay` running in the background on a PostgreSQL
// schema of the test's own, publishing to a JetStream stream of its own.
type pgRelay struct {
	done   chan result
	cancel context.CancelFunc
	stderr *syncBuffer // read while the relay runs
	js     jetstream.JetStream
	stream string
	res    *result
}

// startPGRelay runs `outbox relay` with args on dsn (tagged with
// application_name app, so that the test can find its connections), sending
// every message to a stream of t's own. The relay is stopped when t ends.
func startPGRelay(t *testing.T, dsn, app string, args ...string) *pgRelay {
	t.Helper()
	st := testsvc.NewJetStream(t)
	natsURL, js, stream := st.URL, st.JS, st.Name
	cfgFile := writeFile(t, "relay.yaml", fmt.Sprintf(`
brokers:
  - name: events
    url: %s
    stream: %s
    prefix: %q
log_format: text
archive_every: 0s
`, natsURL, stream, strings.ToLower(stream)+"."))

	ctx, cancel := context.WithCancel(context.Background())
	r := &pgRelay{done: make(chan result, 1), cancel: cancel, js: js, stream: stream, stderr: &syncBuffer{}}
	go func() {
		var out syncBuffer
		code := Main(ctx, append([]string{"outbox", "relay", "--config", cfgFile, "--db", dsn + "&application_name=" + app}, args...),
			&out, r.stderr)
		r.done <- result{code: code, stdout: out.String(), stderr: r.stderr.String()}
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops the relay (once) and returns what it did.
func (r *pgRelay) stop(t *testing.T) result {
	t.Helper()
	if r.res == nil {
		r.cancel()
		select {
		case res := <-r.done:
			r.res = &res
		case <-time.After(20 * time.Second):
			t.Fatal("relay did not exit within 20 s of the cancel")
		}
	}
	return *r.res
}

// exited fails t if the relay has already stopped.
func (r *pgRelay) exited(t *testing.T) {
	t.Helper()
	select {
	case res := <-r.done:
		r.res = &res
		t.Fatalf("relay exited early: %d %s", res.code, res.stderr)
	default:
	}
}

// count returns how many messages the relay's stream holds.
func (r *pgRelay) count(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := r.js.Stream(ctx, r.stream)
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// insertSQL writes n rows into table with a plain INSERT, as a service in
// another language would: no NOTIFY of its own, only the contract's columns.
func insertSQL(t *testing.T, pool *pgxpool.Pool, table string, n int) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `INSERT INTO `+pgx.Identifier{table}.Sanitize()+
		` (message_id, aggregate_type, aggregate_id, event_type, payload)
	SELECT 'm-' || i || '-' || md5(random()::text), 'order', 'o-' || i, 'ORDER_PAID', '{}'::jsonb
	FROM generate_series(1, $1) AS i`, n)
	require.NoError(t, err)
}

// TestMigrateNotifyTriggerWakesRelay runs `outbox migrate` with and without
// --notify-trigger, then a relay with notify_trigger and a 10 s poll
// interval, and writes a row with plain SQL once the relay has listened and
// answered its first wake-up: only the trigger's NOTIFY can get the row out
// long before the next poll. Without the trigger the relay says that it is
// missing.
func TestMigrateNotifyTriggerWakesRelay(t *testing.T) {
	t.Parallel()
	const (
		poll = 10 * time.Second
		soon = 2 * time.Second // well under poll; a notified relay takes milliseconds
	)
	for _, tc := range []struct {
		name        string
		migrateArgs []string
		published   bool // within soon
	}{
		{"Trigger", []string{"--notify-trigger"}, true},
		// The control: without the trigger, nothing wakes the relay.
		{"NoTrigger", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, _, dsn := testsvc.PostgresSchema(t)
			// NOTIFY channels are per database, not per schema, and pgstore
			// names the channel after the table: a table name of the test's
			// own keeps the notifications of other tests (other schemas, other
			// packages) from waking this relay.
			table := testsvc.Name(t)
			r := run(t.Context(), append([]string{"migrate", "--db", dsn, "--table", table}, tc.migrateArgs...)...)
			require.Equal(t, ExitOK, r.code, r.stderr)
			var triggers int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_trigger
			WHERE tgrelid = to_regclass($1) AND tgname = 'outbox_notify'`, table).Scan(&triggers))
			require.Equal(t, map[bool]int{true: 1, false: 0}[tc.published], triggers, "the trigger is installed when asked for")

			app := testsvc.Name(t)
			relay := startPGRelay(t, dsn, app, "--table", table, "--notify-trigger", "--poll-interval", poll.String(),
				"--log-level", "debug")
			if tc.published {
				// The relay listens, and has claimed (finding nothing) after its
				// LISTEN: the wake-up the listener sends when it starts is answered,
				// so the relay now sleeps for the poll interval.
				testsvc.Eventually(t, 15*time.Second, func() bool {
					relay.exited(t)
					var n int
					err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity AS a
					WHERE a.application_name = $1 AND a.state = 'idle' AND a.query NOT LIKE 'LISTEN %'
					  AND a.query_start > (SELECT l.query_start FROM pg_stat_activity AS l
					                       WHERE l.application_name = $1 AND l.query LIKE 'LISTEN %')`, app).Scan(&n)
					return err == nil && n > 0
				}, "the relay listens and has claimed since")
			} else {
				// Without the trigger the relay does not listen for notifications
				// that would never come: it says what to run, and polls; its first
				// claim found nothing, so it now sleeps for the poll interval. (The
				// log line, not pg_stat_activity, says the claim ran: the start's
				// table check prepares the claim statements, which shows their
				// text there before any claim.)
				testsvc.Eventually(t, 15*time.Second, func() bool {
					relay.exited(t)
					log := relay.stderr.String()
					return strings.Contains(log, "has no NOTIFY trigger, so writes wake no one") &&
						strings.Contains(log, "no rows due, relay idle")
				}, "the relay says the trigger is missing, and has claimed")
			}

			start := time.Now()
			insertSQL(t, pool, table, 1)
			deadline := time.NewTimer(soon)
			defer deadline.Stop()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			published := false
			for !published {
				select {
				case <-deadline.C:
				case <-tick.C:
					published = relay.count(t) == 1
					continue
				}
				break
			}
			t.Logf("published: %v after %v", published, time.Since(start).Round(time.Millisecond))
			require.Equal(t, tc.published, published, "published within %v with a %v poll interval", soon, poll)

			res := relay.stop(t)
			require.Equal(t, ExitOK, res.code, res.stderr)
		})
	}
}

// TestMigrateBatchLeaseRelayDrains runs `outbox migrate --batch-lease` and a
// relay with batch_lease (and async_commit) that drains rows written with
// plain SQL. A relay with batch_lease on a table migrated without it finds
// no lease table: that shows the relay does lease batches there.
func TestMigrateBatchLeaseRelayDrains(t *testing.T) {
	t.Parallel()
	const rows = 250
	for _, tc := range []struct {
		name        string
		migrateArgs []string
		drains      bool
	}{
		{"Migrated", []string{"--batch-lease"}, true},
		{"NotMigrated", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, _, dsn := testsvc.PostgresSchema(t)
			r := run(t.Context(), append([]string{"migrate", "--db", dsn}, tc.migrateArgs...)...)
			require.Equal(t, ExitOK, r.code, r.stderr)
			var leaseTable bool
			require.NoError(t, pool.QueryRow(t.Context(), "SELECT to_regclass('outbox_message_lease') IS NOT NULL").Scan(&leaseTable))
			require.Equal(t, tc.drains, leaseTable, "migrate creates the lease table when asked for")

			insertSQL(t, pool, "outbox_message", rows)
			relay := startPGRelay(t, dsn, testsvc.Name(t), "--batch-lease", "--async-commit", "--delete-sent",
				"--batch-size", "50", "--relays", "2", "--poll-interval", "50ms")
			if !tc.drains {
				// The table check finds the missing lease table: the relay
				// exits 1 before it starts, saying what to run.
				var res result
				select {
				case res = <-relay.done:
					relay.res = &res
				case <-time.After(20 * time.Second):
					t.Fatal("the relay did not exit on a table without its lease table")
				}
				require.Equal(t, ExitRuntime, res.code, res.stderr)
				require.Contains(t, res.stderr, `relation "outbox_message_lease" does not exist`)
				require.Contains(t, res.stderr, "run `outbox migrate` with this config")
				require.NotContains(t, res.stderr, "daemon started")
				var n int
				require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM outbox_message WHERE status = 0").Scan(&n))
				require.Equal(t, rows, n, "every row still pending")
				require.Zero(t, relay.count(t), "nothing published")
				return
			}
			testsvc.Eventually(t, 30*time.Second, func() bool {
				relay.exited(t)
				var n int
				err := pool.QueryRow(t.Context(), "SELECT count(*) FROM outbox_message").Scan(&n)
				return err == nil && n == 0 && relay.count(t) == rows
			}, "every row published and deleted")
			var open int
			require.NoError(t, pool.QueryRow(t.Context(),
				"SELECT count(*) FROM outbox_message_lease WHERE cardinality(ids) > 0").Scan(&open))
			require.Zero(t, open, "every batch lease is settled")
			res := relay.stop(t)
			require.Equal(t, ExitOK, res.code, res.stderr)
			require.Contains(t, res.stderr, `msg="daemon stopped"`)
		})
	}
}
