package cli

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	ucli "github.com/urfave/cli/v3"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// result is what one run of Main did.
type result struct {
	code           int
	stdout, stderr string
}

// run calls Main in-process with the arguments after the program name.
func run(ctx context.Context, args ...string) result {
	var out, errb syncBuffer
	code := Main(ctx, append([]string{"outbox"}, args...), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// requireOneLine checks that stderr is exactly one "outbox: " line, no trace.
func requireOneLine(t *testing.T, r result) string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.Len(t, lines, 1, "stderr: %q", r.stderr)
	require.True(t, strings.HasPrefix(lines[0], "outbox: "), "stderr: %q", r.stderr)
	require.NotContains(t, r.stderr, "goroutine")
	require.NotContains(t, r.stderr, "panic")
	require.NotContains(t, r.stderr, "Incorrect Usage")
	return lines[0]
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestHelpListsEverySetting(t *testing.T) {
	t.Parallel()
	r := run(t.Context(), "relay", "--help")
	require.Equal(t, ExitOK, r.code, r.stderr)
	for _, s := range config.Settings() {
		// One line per flag: the flag, its usage, its default, its variable.
		line := regexp.MustCompile(`(?m)^\s+--` + regexp.QuoteMeta(s.Flag) + `\b.*$`).FindString(r.stdout)
		require.NotEmpty(t, line, "--%s is listed", s.Flag)
		require.Contains(t, line, "[$"+s.Env+"]", "--%s names its variable", s.Flag)
		if s.Default != "" && !s.Bool {
			require.Contains(t, line, "(default: "+s.Default+")", "--%s shows its default", s.Flag)
		}
	}
	require.Contains(t, r.stdout, "--config FILE")
	require.Contains(t, r.stdout, "[$OUTBOX_CONFIG]")
	require.Contains(t, r.stdout, fmt.Sprintf("(default: %d)", outbox.DefaultMaxBatchSize))
	require.Contains(t, r.stdout, fmt.Sprintf("(default: %v)", outbox.DefaultPublishTimeout))

	r = run(t.Context(), "--help")
	require.Equal(t, ExitOK, r.code)
	for _, cmd := range []string{"relay", "migrate", "status", "demo", "cdc"} {
		require.Regexp(t, `(?m)^\s+`+cmd+`\s`, r.stdout)
	}
	r = run(t.Context(), "status", "--help")
	require.Equal(t, ExitOK, r.code)
	require.Contains(t, r.stdout, "[$OUTBOX_DB]")
	require.Contains(t, r.stdout, "--json")
	require.NotContains(t, r.stdout, "--batch-size", "status takes only the database settings")
	r = run(t.Context(), "migrate", "--help")
	require.Equal(t, ExitOK, r.code)
	for _, flag := range []string{"--notify-trigger", "--batch-lease", "[$OUTBOX_BATCH_LEASE]", "--table", "--cdc ",
		"--cdc-slot", "--cdc-publication"} {
		require.Contains(t, r.stdout, flag, "migrate installs what the table's pgstore switches need")
	}
	require.NotContains(t, r.stdout, "--async-commit", "async_commit concerns only the relay")
	require.NotContains(t, r.stdout, "--held-claims", "held_claims needs no migration")
}

// statusOf runs `outbox status --json` with args and decodes it.
func statusOf(t *testing.T, args ...string) statusJSON {
	t.Helper()
	r := run(t.Context(), append([]string{"status", "--json"}, args...)...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	return st
}

func TestMigrateAndStatusSQLite(t *testing.T) {
	t.Parallel()
	path := testsvc.SQLitePath(t)
	dsn := "sqlite://" + path
	for range 2 { // idempotent
		r := run(t.Context(), "migrate", "--db", dsn)
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Equal(t, "migrated table outbox_message (sqlite)\n", r.stdout)
	}
	require.Equal(t, statusJSON{Table: "outbox_message"}, statusOf(t, "--db", dsn))

	db, err := sqlitestore.Open(path)
	require.NoError(t, err)
	defer db.Close()
	s, err := sqlitestore.New(db)
	require.NoError(t, err)
	writeMessages(t, db, s, 3)

	st := statusOf(t, "--db", dsn)
	require.EqualValues(t, 3, st.Pending)
	require.Greater(t, st.OldestPendingSeconds, 0.0)
	require.Zero(t, st.Dead)

	r := run(t.Context(), "status", "--db", dsn)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^table\s+outbox_message$`, r.stdout)
	require.Regexp(t, `(?m)^pending\s+3$`, r.stdout)
	require.Regexp(t, `(?m)^oldest pending\s+\d`, r.stdout)
	require.Regexp(t, `(?m)^dead\s+0$`, r.stdout)
	require.Regexp(t, `(?m)^sent last minute\s+0$`, r.stdout)
	require.Regexp(t, `(?m)^sent last hour\s+0$`, r.stdout)
	require.Regexp(t, `(?m)^other status\s+0$`, r.stdout)

	// A row another program set to a status the relay does not know is
	// shown apart, not hidden.
	_, err = db.ExecContext(t.Context(), "UPDATE outbox_message SET status = 7 WHERE id = (SELECT MIN(id) FROM outbox_message)")
	require.NoError(t, err)
	st = statusOf(t, "--db", dsn)
	require.EqualValues(t, 2, st.Pending)
	require.EqualValues(t, 1, st.OtherStatus)
	r = run(t.Context(), "status", "--db", dsn)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^other status\s+1$`, r.stdout)
	r = run(t.Context(), "status", "--db", dsn, "--json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"other_status":1`)

	// Another table in the same file, named by flag.
	r = run(t.Context(), "migrate", "--db", dsn, "--table", "other_outbox")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Zero(t, statusOf(t, "--db", dsn, "--table", "other_outbox").Pending)
}

func TestMigrateAndStatusPostgres(t *testing.T) {
	t.Parallel()
	pool, _, dsn := testsvc.PostgresSchema(t)
	r := run(t.Context(), "migrate", "--db", dsn)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Equal(t, "migrated table outbox_message (postgres)\n", r.stdout)

	s, err := pgstore.New(pool)
	require.NoError(t, err)
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter(s).Write(ctx, tx,
		&outbox.Message{AggregateType: "order", AggregateID: "1", EventType: "ORDER_PAID", Payload: []byte(`{}`)},
		&outbox.Message{AggregateType: "order", AggregateID: "2", EventType: "ORDER_PAID", Payload: []byte(`{}`)}))
	require.NoError(t, tx.Commit(ctx))

	st := statusOf(t, "--db", dsn)
	require.EqualValues(t, 2, st.Pending)
	require.Zero(t, st.Dead)
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite://" + testsvc.SQLitePath(t)
	migrated := "sqlite://" + testsvc.SQLitePath(t)
	require.Equal(t, ExitOK, run(t.Context(), "migrate", "--db", migrated).code)
	file := func(content string) string { return writeFile(t, "outbox.yaml", content) }
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // the stderr line, after "outbox: "; a trailing "..." matches a prefix
	}{
		{"NoCommand", nil, ExitUsage, "a command is required (relay, migrate, status, demo, ...)"}, // then the extraCommands
		{"UnknownCommand", []string{"frobnicate"}, ExitUsage, `unknown command "frobnicate"; see outbox --help`},
		{"UnknownFlag", []string{"status", "--frob"}, ExitUsage, "flag provided but not defined: -frob"},
		{"FlagWithoutValue", []string{"migrate", "--db"}, ExitUsage, "flag needs an argument: --db"},
		{"NoDB", []string{"migrate"}, ExitUsage, "db: required: the database URL (--db, OUTBOX_DB, or db: in the config file)"},
		{"UnknownDBScheme", []string{"migrate", "--db", "oracle://scott:tiger@db/orcl"}, ExitUsage,
			`db: unknown scheme "oracle"; want postgres://, postgresql://, sqlite://, mysql://`},
		{"BadTableName", []string{"migrate", "--db", sqlite, "--table", "x; drop table y"}, ExitUsage,
			`table: "x; drop table y" is not a valid table name for sqlite:// (name or schema.name, each part a letter or underscore, then up to 62 letters, digits or underscores)`},
		// pgstore refuses upper case; the config says so before anything connects.
		{"UpperCaseTablePostgres", []string{"relay", "--db", "postgres://u:hunter22@127.0.0.1:1/db", "--broker", "nats://h", "--table", "Outbox"},
			ExitUsage, `table: "Outbox" is not a valid table name for postgres:// (name or schema.name, each part a lower-case letter or underscore, then up to 62 lower-case letters, digits or underscores)`},
		{"UnreachablePostgres", []string{"status", "--db", "postgres://postgres:hunter22@127.0.0.1:1/test?connect_timeout=2"},
			ExitRuntime, "open postgres database: pgstore: ping: failed to connect to `user=postgres database=test`: ..."},
		{"SQLiteNoDirectory", []string{"migrate", "--db", "sqlite:///nonexistent/dir/outbox.db"}, ExitRuntime,
			"open sqlite database: sqlitestore: open /nonexistent/dir/outbox.db: unable to open database file ..."},
		{"StatusWithoutTable", []string{"status", "--db", sqlite, "--table", "missing"}, ExitRuntime,
			"read stats of missing: ..."},
		{"MissingConfigFile", []string{"relay", "--config", "/nonexistent/outbox.yaml"}, ExitUsage,
			"read config: open /nonexistent/outbox.yaml: no such file or directory"},
		{"MalformedYAML", []string{"relay", "--config", file("db: sqlite://x.db\nbrokers:\n  - name: a\n   url: nats://h\n")},
			ExitUsage, "config ...: line 2: did not find expected '-' indicator"},
		{"WrongTypes", []string{"relay", "--config", file("batch_size: lots\npoll_interval: 5\n")}, ExitUsage,
			`config ...: line 1: batch_size: "lots" is not a whole number; line 2: poll_interval: "5" is not a duration with a unit (500ms, 5s, 1m30s)`},
		{"UnknownKey", []string{"relay", "--config", file("db: sqlite://x.db\nbatch_sise: 10\n")}, ExitUsage,
			`config ...: line 2: unknown key "batch_sise"`},
		{"FlagWrongType", []string{"relay", "--db", sqlite, "--broker", "nats://h", "--batch-size", "ten"}, ExitUsage,
			`--batch-size: "ten" is not a whole number`},
		{"NoBroker", []string{"relay", "--db", sqlite}, ExitUsage,
			"broker: required: a broker URL (--broker, OUTBOX_BROKER, or broker: or brokers: in the config file)"},
		{"UnknownBrokerScheme", []string{"relay", "--db", sqlite, "--broker", "sqs://queue"}, ExitUsage,
			`broker.url: unknown scheme "sqs"; want nats://, kafka://, amqp://, amqps://, redis://, rediss://, http://, https://, mqtt://, mqtts://`},
		{"SeveralProblems", []string{"relay", "--db", sqlite, "--broker", "nats://h", "--lease", "1s", "--log-format", "xml"},
			ExitUsage, `lease: 1s is shorter than twice publish_timeout (3s); log_format: "xml" is not text or json`},
		{"HeldClaimsWithBatchLease", []string{"relay", "--db", "postgres://u:hunter22@127.0.0.1:1/db", "--broker", "nats://h",
			"--held-claims", "--batch-lease", "--ordering=false"}, ExitUsage, "held_claims: excludes batch_lease: they are two ways of claiming; choose one"},
		{"HTTPPortOutOfRange", []string{"relay", "--db", sqlite, "--broker", "nats://h", "--http", "127.0.0.1:99999"}, ExitUsage,
			`http: "127.0.0.1:99999" port "99999" is not a number from 0 to 65535; want an address like 127.0.0.1:9090`},
		{"BrokerPortOutOfRange", []string{"relay", "--db", sqlite, "--broker", "nats://relay:hunter22@h:70000"}, ExitUsage,
			`broker.url: the URL port "70000" is not a number from 1 to 65535`},
		{"HeldClaimsSQLite", []string{"relay", "--db", sqlite, "--broker", "nats://h", "--held-claims", "--ordering=false"}, ExitUsage,
			"held_claims: applies to postgres:// only, not sqlite://"},
		{"BadTopicTemplate", []string{"relay", "--db", sqlite, "--config", file("broker: nats://h\ndefault_route: {broker: default, topic: '{{.Nope}}'}\n")},
			ExitUsage, `router: new: route 1 (default_route): topic template "{{.Nope}}": ...`},
		// The relay checks its table before it starts: exit 1 with what to fix.
		{"RelayWithoutTable", []string{"relay", "--db", sqlite, "--broker", "nats://relay:hunter22@127.0.0.1:1"}, ExitRuntime,
			"check table: outbox: table outbox_message cannot be used by the relay: - table outbox_message not found in the database file; fix: run `outbox migrate` with this config, ..."},
		{"UnreachableBroker", []string{"relay", "--db", migrated, "--broker", "nats://relay:hunter22@127.0.0.1:1"}, ExitRuntime,
			"broker default: connect to nats: ..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := run(t.Context(), tc.args...)
			require.Equal(t, tc.code, r.code, "stderr: %s", r.stderr)
			line := strings.TrimPrefix(requireOneLine(t, r), "outbox: ")
			requireLike(t, tc.want, line)
			for _, secret := range []string{"hunter22", "tiger"} {
				require.NotContains(t, r.stderr, secret)
			}
		})
	}
}

// requireLike checks line against want, where "..." stands for any text.
func requireLike(t *testing.T, want, line string) {
	t.Helper()
	parts := strings.Split(want, "...")
	if len(parts) == 1 {
		require.Equal(t, want, line)
		return
	}
	rest, ok := strings.CutPrefix(line, parts[0])
	require.True(t, ok, "%q does not start with %q", line, parts[0])
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		require.GreaterOrEqual(t, i, 0, "%q lacks %q", line, p)
		rest = rest[i+len(p):]
	}
	require.True(t, strings.HasSuffix(rest, parts[len(parts)-1]), "%q does not end with %q", line, parts[len(parts)-1])
}

// settingsOf runs a command with the relay's flags and returns the config
// loadConfig builds from args, the environment and the file.
func settingsOf(t *testing.T, args ...string) (*config.Config, error) {
	t.Helper()
	var got *config.Config
	var err error
	cmd := &ucli.Command{
		Name:      "relay",
		Flags:     append([]ucli.Flag{configFlag()}, settingFlags()...),
		Writer:    &bytes.Buffer{},
		ErrWriter: &bytes.Buffer{},
		Action: func(_ context.Context, cmd *ucli.Command) error {
			got, err = loadConfig(cmd)
			return nil
		},
	}
	require.NoError(t, cmd.Run(t.Context(), append([]string{"relay"}, args...)))
	return got, err
}

// Not parallel: it sets environment variables.
func TestPrecedenceFlagEnvFileDefault(t *testing.T) {
	file := writeFile(t, "outbox.yaml", "batch_size: 10\nlease: 40s\ntable: from_file\nordering: true\n")

	c, err := settingsOf(t)
	require.NoError(t, err)
	require.Equal(t, 0, c.BatchSize, "default: sized by the relay")

	c, err = settingsOf(t, "--config", file)
	require.NoError(t, err)
	require.Equal(t, 10, c.BatchSize, "file over default")
	require.Equal(t, "from_file", c.Table)

	t.Setenv("OUTBOX_BATCH_SIZE", "20")
	t.Setenv("OUTBOX_TABLE", "from_env")
	c, err = settingsOf(t, "--config", file)
	require.NoError(t, err)
	require.Equal(t, 20, c.BatchSize, "environment over file")
	require.Equal(t, "from_env", c.Table)
	require.Equal(t, 40*time.Second, c.Lease, "the file's other keys stay")

	c, err = settingsOf(t, "--config", file, "--batch-size", "30", "--ordering=false")
	require.NoError(t, err)
	require.Equal(t, 30, c.BatchSize, "flag over environment")
	require.False(t, c.Ordering, "a switch turned off by flag")
	require.Equal(t, "from_env", c.Table)

	t.Setenv("OUTBOX_CONFIG", file)
	t.Setenv("OUTBOX_BATCH_SIZE", "")
	c, err = settingsOf(t)
	require.NoError(t, err)
	require.Equal(t, 10, c.BatchSize, "OUTBOX_CONFIG names the file; an empty number variable is ignored")

	t.Setenv("OUTBOX_LEASE", "soon")
	_, err = settingsOf(t)
	require.EqualError(t, err, `OUTBOX_LEASE: "soon" is not a duration (like 500ms, 2s, 1m30s)`)

	r := run(t.Context(), "relay")
	require.Equal(t, ExitUsage, r.code)
	require.Equal(t, "outbox: OUTBOX_LEASE: \"soon\" is not a duration (like 500ms, 2s, 1m30s)\n", r.stderr)
}

// The relay against SQLite and the real NATS: a few messages go out, then a
// cancelled context (SIGTERM in main) makes it drain and exit 0.
func TestRelaySQLiteToNATS(t *testing.T) {
	t.Parallel()
	path := testsvc.SQLitePath(t)
	ns := testsvc.NewJetStream(t)
	natsURL := ns.URL
	r := run(t.Context(), "migrate", "--db", "sqlite://"+path)
	require.Equal(t, ExitOK, r.code, r.stderr)
	db, err := sqlitestore.Open(path)
	require.NoError(t, err)
	defer db.Close()
	s, err := sqlitestore.New(db)
	require.NoError(t, err)
	msgs := writeMessages(t, db, s, 5)

	js, stream := ns.JS, ns.Name
	prefix := strings.ToLower(stream) + "."
	cfgFile := writeFile(t, "relay.yaml", fmt.Sprintf(`
brokers:
  - name: events
    url: %s
    stream: %s
    prefix: %q
log_format: text
`, natsURL, stream, prefix))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- run(ctx, "relay", "--config", cfgFile, "--db", "sqlite://"+path, "--poll-interval", "50ms", "--relays", "2")
	}()

	count := func() uint64 {
		sctx, scancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer scancel()
		st, err := js.Stream(sctx, stream)
		if err != nil {
			return 0
		}
		info, err := st.Info(sctx)
		if err != nil {
			return 0
		}
		return info.State.Msgs
	}
	testsvc.Eventually(t, 20*time.Second, func() bool {
		select {
		case r := <-done:
			t.Fatalf("relay exited early: %d %s", r.code, r.stderr)
		default:
		}
		return count() == uint64(len(msgs))
	}, "the stream holds the %d messages", len(msgs))
	testsvc.Eventually(t, 10*time.Second, func() bool {
		st, err := s.Stats(t.Context())
		return err == nil && st.Pending == 0
	}, "every row acknowledged")

	cancel()
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("relay did not exit within 20 s of the cancel")
	}
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, `msg="daemon started"`)
	require.Contains(t, r.stderr, `msg="daemon stopped"`)
	require.Equal(t, 2, strings.Count(r.stderr, `msg="relay stopped"`))
	require.NotContains(t, r.stderr, path, "the DSN is never logged")

	sctx, scancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer scancel()
	st, err := js.Stream(sctx, stream)
	require.NoError(t, err)
	for _, m := range msgs {
		got, err := st.GetLastMsgForSubject(sctx, prefix+m.EventType)
		require.NoError(t, err)
		require.NotEmpty(t, got.Header.Get(jetstream.MsgIDHeader))
	}
	require.Equal(t, statusJSON{Table: "outbox_message", SentLastMinute: 5, SentLastHour: 5},
		statusOf(t, "--db", "sqlite://"+path))
}

func TestDemoFlags(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // fail, don't hang, if the demo does
	defer cancel()
	r := run(ctx, "demo", "--orders", "60", "--pay-time", "1s", "--outage-at", "300ms", "--outage-for", "300ms",
		"--seed", "7", "--declines", "-1", "--quiet")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "60 orders on each path, 0 declined")
	require.Contains(t, r.stdout, "broker dark from 0.3s to 0.6s")
	require.Contains(t, r.stdout, "seed 7")
	require.Regexp(t, `paid but not shipped \("stuck"\)\s+\d+\s+\d+\s+0\s*\n`, r.stdout, "the outbox column shows 0 stuck")

	r = run(t.Context(), "demo", "--orders", "zero")
	require.Equal(t, ExitUsage, r.code)
	requireOneLine(t, r)
}

// writeMessages commits n messages, one event type each, through the store's Writer.
func writeMessages(t *testing.T, db *sql.DB, s *sqlitestore.Store, n int) []*outbox.Message {
	t.Helper()
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprint(i), EventType: fmt.Sprintf("ORDER_%d", i),
			Payload: []byte(`{"total":12}`)}
	}
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter[*sql.Tx](s).Write(t.Context(), tx, msgs...))
	require.NoError(t, tx.Commit())
	return msgs
}

// syncBuffer is a bytes.Buffer safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Whatever command or driver wrote an error, the line printed hides the
// secret parts of the URLs and DSNs in it.
func TestOneLineHidesURLSecrets(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("outbox: open: %w", errors.Join(
		errors.New("dial amqp://relay:pw@rabbit:5672/ failed:"),
		errors.New(`Post "https://h/hooks/T0SECRET?api_key=tok123": EOF`),
		errors.New("root:hunter2@tcp(db:3306)/shop refused")))
	require.Equal(t, `open: dial amqp://relay:REDACTED@rabbit:5672/ failed: `+
		`Post "https://h/REDACTED?api_key=REDACTED": EOF; root:REDACTED@tcp(db:3306)/shop refused`, oneLine(err))
}
