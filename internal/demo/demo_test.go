package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/internal/testsvc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// smallRun is a short demo: 120 orders over 2 s, the broker dark from 0.9 s
// to 1.8 s (connections refused from 1.35 s): 45 % of the payments meet it.
// With seed 38, three of the four declined orders arrive in the first 0.2 s,
// so publish-first sends their messages: ghosts. The 0.7 s between them and
// the outage is for a busy machine (with 0.2 s, a CI run under load once
// saw all three publishes meet the outage, and no ghost).
func smallRun() Config {
	return Config{
		Orders:    120,
		PayTime:   2 * time.Second,
		OutageAt:  900 * time.Millisecond,
		OutageFor: 900 * time.Millisecond,
		Seed:      38,
	}
}

// requireIncident checks what the demo exists to show, from a Summary. The
// hand-written paths meet the outage at different times on a slow machine:
// publish-first publishes as each order arrives, naive only after its
// commit, which a busy database can delay past the outage. So naive losses
// are required only when naiveMustLose.
func requireIncident(t *testing.T, cfg Config, s *Summary, naiveMustLose bool) {
	t.Helper()
	declined := int(float64(cfg.Orders)*DefaultDeclines + 0.5)
	require.Equal(t, cfg.Orders, s.Orders)
	require.Equal(t, declined, s.Declined)
	require.Equal(t, cfg.Seed, s.Seed)

	// The outbox: every committed order is shipped once, nothing else is.
	o := s.Outbox
	require.Equal(t, "outbox", o.Name)
	require.Equal(t, cfg.Orders-declined, o.Paid, "the outbox path takes every payment, outage or not")
	require.Zero(t, o.Failed)
	require.Zero(t, o.Stuck, "outbox: paid but not shipped")
	require.Zero(t, o.Ghosts, "outbox: shipped but not paid")
	require.Zero(t, o.Dead)
	require.Equal(t, o.Paid, o.Delivered, "outbox: one shipment per paid order")

	// Commit, then publish: the incident. Every payment commits, and the
	// messages whose publish failed twice are gone.
	n := s.Naive
	require.Equal(t, cfg.Orders-declined, n.Paid)
	if naiveMustLose {
		require.Positive(t, n.Stuck, "the outage must leave paid orders unshipped on the naive path")
	}
	require.LessOrEqual(t, n.Stuck, n.Lost, "every stuck order is one whose publish the code saw fail")
	require.Equal(t, n.Paid-n.Stuck, n.Delivered)
	require.Zero(t, n.Ghosts)

	// Publish, then commit: refused payments instead of stuck orders, and
	// ghosts for declined payments whose message had gone out.
	p := s.PublishFirst
	require.Positive(t, p.Failed, "the outage must refuse payments on the publish-first path")
	require.Equal(t, cfg.Orders-declined-p.Failed, p.Paid)
	require.Zero(t, p.Stuck)
	require.Positive(t, p.Ghosts, "declined payments whose message went out are shipped anyway")
	require.Equal(t, p.Paid+p.Ghosts, p.Delivered)

	for _, r := range s.Paths() {
		require.Equal(t, r.DuplicatesSeen, r.DuplicatesAbsorbed, "%s: every duplicate seen is absorbed by the inbox", r.Name)
		require.Positive(t, r.LastShipment, r.Name)
		require.LessOrEqual(t, r.LastShipment, s.Elapsed, r.Name)
	}
}

func TestRunEmbedded(t *testing.T) {
	t.Parallel()
	cfg := smallRun()
	// Naive loses a message only when a commit lands while the broker
	// refuses connections (a publish in the dark phase hangs until after
	// it). Under the race detector and the suite's load the SQLite commits
	// fell behind by more than the 0.45 s of smallRun's refusing phase
	// (46 failed attempts, every retry after the outage, nothing lost), so
	// this run refuses for 0.9 s.
	cfg.PayTime, cfg.OutageFor = 3*time.Second, 1800*time.Millisecond
	var out bytes.Buffer
	start := time.Now()
	s, err := Run(t.Context(), cfg, &out)
	require.NoError(t, err, out.String())
	t.Logf("took %v\n%s", time.Since(start), out.String())
	requireIncident(t, cfg, s, true)
	require.Equal(t, "SQLite in a temporary folder", s.DB)
	require.Contains(t, s.Broker, "embedded NATS JetStream")

	text := out.String()
	require.NotContains(t, text, "\r", "a buffer is not a terminal: plain lines, no bar")
	for _, want := range []string{
		"broker dark", "broker refusing connections", "broker back", // progress events
		`paid but not shipped ("stuck")`, "naive", "publish-first", "outbox", // the table
	} {
		require.Contains(t, text, want)
	}
}

func TestRunPostgresAndNATS(t *testing.T) {
	t.Parallel()
	pool, schema, dsn := testsvc.PostgresSchema(t)
	cfg := smallRun()
	cfg.DB = dsn
	cfg.Broker = testsvc.NATSURL(t)
	cfg.Quiet = true
	var out bytes.Buffer
	s, err := Run(t.Context(), cfg, &out)
	require.NoError(t, err)
	t.Logf("\n%s", out.String())
	requireIncident(t, cfg, s, false) // the shared PostgreSQL can be slow under the suite's load
	require.Contains(t, s.DB, "PostgreSQL")
	require.Contains(t, s.Broker, "NATS JetStream at nats://")
	require.False(t, strings.HasPrefix(out.String(), "outbox demo:"), "Quiet prints only the table")

	// The run removed its tables and streams.
	requireNoTables(t, pool, schema)
	nc, err := nats.Connect(cfg.Broker)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for _, k := range pathKinds {
		stream := strings.ToUpper("outbox_demo_" + s.Run + "_" + k.ident())
		_, err := js.Stream(t.Context(), stream)
		require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "stream %s left behind", stream)
	}
}

// TestRunPostgresCDC runs the outbox path's relay on the write-ahead log:
// the same incident, every paid order shipped once, and no slot left.
func TestRunPostgresCDC(t *testing.T) {
	t.Parallel()
	testsvc.NeedLogical(t)
	pool, schema, dsn := testsvc.PostgresSchema(t)
	cfg := smallRun()
	cfg.DB, cfg.Broker, cfg.Quiet, cfg.CDC = dsn, testsvc.NATSURL(t), true, true
	var out bytes.Buffer
	s, err := Run(t.Context(), cfg, &out)
	require.NoError(t, err)
	t.Logf("\n%s", out.String())
	requireIncident(t, cfg, s, false)
	requireNoTables(t, pool, schema)
	var slots int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1",
		"outbox_outbox_demo_"+s.Run+"%").Scan(&slots))
	require.Zero(t, slots, "the run left its replication slot behind")
}

// TestRunBrokerDownThroughout keeps the broker dark for the whole payment
// phase and beyond, so that the relay cannot miss the outage however slow
// the machine. The last quarter of the payments meets refused connections.
func TestRunBrokerDownThroughout(t *testing.T) {
	t.Parallel()
	cfg := Config{
		Orders:    60,
		PayTime:   2 * time.Second,
		OutageAt:  10 * time.Millisecond,
		OutageFor: 3 * time.Second,
		Seed:      3,
		Quiet:     true,
	}
	s, err := Run(t.Context(), cfg, &bytes.Buffer{})
	require.NoError(t, err)
	o := s.Outbox
	require.Positive(t, o.FailedAttempts, "the relay must have met the outage")
	require.Equal(t, cfg.Orders-s.Declined, o.Paid)
	require.Equal(t, o.Paid, o.Delivered)
	require.Zero(t, o.Stuck)
	require.Zero(t, o.Ghosts)
	require.GreaterOrEqual(t, o.LastShipment, cfg.OutageAt+cfg.OutageFor,
		"orders paid while connections were refused ship once the broker is back")
	require.Positive(t, s.Naive.Stuck)
	require.Positive(t, s.PublishFirst.Failed)
}

func TestRunStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		postgres bool
	}{
		{"Embedded", false},
		{"PostgresAndNATS", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := smallRun()
			cfg.Quiet = true
			var pool *pgxpool.Pool
			var schema string
			if tc.postgres {
				pool, schema, cfg.DB = testsvc.PostgresSchema(t)
				cfg.Broker = testsvc.NATSURL(t)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := Run(ctx, cfg, &bytes.Buffer{})
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Less(t, time.Since(start), 5*time.Second, "Run must stop promptly")
			if tc.postgres {
				requireNoTables(t, pool, schema)
			}
			// goleak (TestMain) checks that every goroutine of the run ended.
		})
	}
}

func TestRunReportsWhatDidNotDrain(t *testing.T) {
	t.Parallel()
	// The broker is back long after the last payment, and the relay is
	// still pausing then: the outbox cannot have drained 1 ms later.
	cfg := Config{
		Orders:       40,
		PayTime:      300 * time.Millisecond,
		OutageAt:     50 * time.Millisecond,
		OutageFor:    3 * time.Second,
		DrainTimeout: time.Millisecond,
		Quiet:        true,
	}
	s, err := Run(t.Context(), cfg, &bytes.Buffer{})
	require.Nil(t, s)
	require.ErrorContains(t, err, "demo: did not drain within 1ms: ")
	require.ErrorContains(t, err, "messages still pending in the outbox table")
}

func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"NegativeOrders", Config{Orders: -1}, []string{"orders: -1"}},
		{"TooManyOrders", Config{Orders: maxOrders + 1}, []string{"orders: 1000001"}},
		{"MySQL", Config{DB: "mysql://root@localhost/test"}, []string{"db: want postgres://"}},
		{"PasswordHidden", Config{DB: "mysql://u:secret@h/db"}, []string{"u:REDACTED@h"}},
		{"BrokerScheme", Config{Broker: "kafka://localhost:9092"}, []string{"broker: want nats://"}},
		{"Negatives", Config{PayTime: -time.Second, OutageAt: -1, OutageFor: -1, DrainTimeout: -1},
			[]string{"pay time", "outage start", "outage length", "drain timeout"}},
		{"Declines", Config{Declines: 0.6}, []string{"declines: 0.6"}},
		{"CDCOnSQLite", Config{CDC: true}, []string{"cdc: needs PostgreSQL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := Run(t.Context(), tc.cfg, &bytes.Buffer{})
			require.Nil(t, s)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			require.NotContains(t, err.Error(), "secret")
		})
	}
}

// requireNoTables fails t when schema holds any table.
func requireNoTables(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	var tables int
	require.NoError(t, pool.QueryRow(t.Context(),
		"SELECT count(*) FROM information_schema.tables WHERE table_schema = $1", schema).Scan(&tables))
	require.Zero(t, tables, "tables left in %s", schema)
}
