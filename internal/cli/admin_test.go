package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// runIn is run with stdin.
func runIn(ctx context.Context, stdin io.Reader, args ...string) result {
	var out, errb syncBuffer
	code := MainIO(ctx, append([]string{"outbox"}, args...), stdin, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// adminDB is one database under the admin tests: the URL the CLI takes, the
// store on its outbox table, a writer of messages and a row counter.
type adminDB struct {
	dsn     string
	store   outbox.Store
	archive string                                    // the archive table's name
	write   func(t *testing.T, ms ...*outbox.Message) // commits ms in one transaction
	count   func(t *testing.T, table string) int      // rows of table
}

func postgresAdminDB(t *testing.T) adminDB {
	pool, _, dsn := testsvc.PostgresSchema(t)
	require.Equal(t, ExitOK, run(t.Context(), "migrate", "--db", dsn).code)
	s, err := pgstore.New(pool)
	require.NoError(t, err)
	w := outbox.NewWriter(s)
	return adminDB{
		dsn: dsn, store: s, archive: s.ArchiveTable(),
		write: func(t *testing.T, ms ...*outbox.Message) {
			tx, err := pool.Begin(t.Context())
			require.NoError(t, err)
			require.NoError(t, w.Write(t.Context(), tx, ms...))
			require.NoError(t, tx.Commit(t.Context()))
		},
		count: func(t *testing.T, table string) int { return countPG(t, pool, table) },
	}
}

func countPG(t *testing.T, pool *pgxpool.Pool, table string) int {
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

func mysqlAdminDB(t *testing.T) adminDB {
	dsn, _, db := mysqlUser(t)
	require.Equal(t, ExitOK, run(t.Context(), "migrate", "--db", dsn).code)
	s, err := mysqlstore.New(db)
	require.NoError(t, err)
	return sqlAdminDB(dsn, s, s.ArchiveTable(), db, outbox.NewWriter[*sql.Tx](s))
}

func sqliteAdminDB(t *testing.T) adminDB {
	path := testsvc.SQLitePath(t)
	dsn := "sqlite://" + path
	require.Equal(t, ExitOK, run(t.Context(), "migrate", "--db", dsn).code)
	db, err := sqlitestore.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	s, err := sqlitestore.New(db)
	require.NoError(t, err)
	return sqlAdminDB(dsn, s, s.ArchiveTable(), db, outbox.NewWriter[*sql.Tx](s))
}

func sqlAdminDB(dsn string, s outbox.Store, archive string, db *sql.DB, w *outbox.Writer[*sql.Tx]) adminDB {
	return adminDB{
		dsn: dsn, store: s, archive: archive,
		write: func(t *testing.T, ms ...*outbox.Message) {
			tx, err := db.BeginTx(t.Context(), nil)
			require.NoError(t, err)
			require.NoError(t, w.Write(t.Context(), tx, ms...))
			require.NoError(t, tx.Commit())
		},
		count: func(t *testing.T, table string) int {
			var n int
			require.NoError(t, db.QueryRowContext(t.Context(), "SELECT count(*) FROM "+table).Scan(&n))
			return n
		},
	}
}

// messagesOf makes n messages of event type typ.
func messagesOf(typ string, n int) []*outbox.Message {
	ms := make([]*outbox.Message, n)
	for i := range ms {
		ms[i] = &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprintf("%s-%d", typ, i), EventType: typ,
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Headers: map[string]string{"tenant": "acme"}}
	}
	return ms
}

// delivered is how many distinct messages of event type typ pub confirmed.
func delivered(pub *outboxtest.Publisher, typ string) int {
	ids := map[string]bool{}
	for _, m := range pub.Messages() {
		if m.EventType == typ {
			ids[m.MessageID] = true
		}
	}
	return len(ids)
}

// notATerminal is a stdin that is a file but no terminal, as in a cron job.
func notATerminal(t *testing.T) *os.File {
	f, err := os.Open(writeFile(t, "stdin", "y\n"))
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// TestDeadAndArchiveWhileRelayRuns runs a real relay whose publisher refuses
// one event type for good, then works the dead messages and archives the
// sent rows with the CLI while the relay keeps running, on each database.
// adminDBs are the databases every admin test runs on, by name.
var adminDBs = []struct {
	name string
	open func(t *testing.T) adminDB
}{
	{"Postgres", postgresAdminDB},
	{"MySQL", mysqlAdminDB},
	{"SQLite", sqliteAdminDB},
}

// eachAdminDB runs test as a parallel subtest on each of adminDBs.
func eachAdminDB(t *testing.T, test func(t *testing.T, db adminDB)) {
	for _, tc := range adminDBs {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			test(t, tc.open(t))
		})
	}
}

func TestDeadAndArchiveWhileRelayRuns(t *testing.T) {
	t.Parallel()
	eachAdminDB(t, testDeadAndArchive)
}

// runRelay runs a relay on db's store that publishes to pub, polling every
// 20 ms, until t ends.
func runRelay(t *testing.T, db adminDB, pub outbox.Publisher, opts ...outbox.RelayOption) {
	relay, err := outbox.NewRelay(db.store, pub, append([]outbox.RelayOption{outbox.WithPollInterval(20 * time.Millisecond),
		outbox.WithMinPollInterval(5 * time.Millisecond), outbox.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- relay.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-stopped)
	})
}

func testDeadAndArchive(t *testing.T, db adminDB) {
	const good, poison = 12, 5
	pub := outboxtest.NewPublisher()
	pub.FailWith(func(m *outbox.Message) error {
		if m.EventType == "POISON" {
			return outbox.Permanent(errors.New("schema registry rejected the payload"))
		}
		return nil
	})
	runRelay(t, db, pub, outbox.WithBatchSize(4))

	db.write(t, append(messagesOf("GOOD", good), messagesOf("POISON", poison)...)...)
	status := func() statusJSON { return statusOf(t, "--db", db.dsn) }
	testsvc.Eventually(t, 20*time.Second, func() bool {
		st := status()
		return st.Dead == poison && st.Pending == 0
	}, "the poison messages die, the rest go out")
	require.Equal(t, good, delivered(pub, "GOOD"))

	// dead list: a table and JSON, filters applied by the store.
	r := run(t.Context(), "dead", "list", "--db", db.dsn)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^ROW\s+MESSAGE ID\s+EVENT TYPE\s+AGGREGATE\s+BEHIND\s+ATTEMPTS\s+DIED AT\s+REASON$`, r.stdout)
	require.Equal(t, poison, strings.Count(r.stdout, "schema registry rejected the payload"))
	require.Contains(t, r.stdout, "order/POISON-0")
	require.Contains(t, r.stdout, fmt.Sprintf("%d dead messages\n", poison))

	var dead []deadJSON
	r = run(t.Context(), "dead", "list", "--db", db.dsn, "--json", "--event-type", "POISON", "--error", "registry")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &dead), r.stdout)
	require.Len(t, dead, poison)
	for _, d := range dead {
		require.Equal(t, "POISON", d.EventType)
		require.Equal(t, 1, d.Attempts)
		require.Zero(t, d.Behind, "each poison message is its aggregate's only one")
		require.Equal(t, "acme", d.Headers["tenant"])
		require.WithinDuration(t, time.Now(), d.DiedAt, time.Minute)
	}
	for _, args := range [][]string{
		{"--event-type", "GOOD"},
		{"--error", "no such text"},
		{"--older-than", "1d"},
		{"--aggregate-id", "POISON-3", "--aggregate-type", "invoice"},
	} {
		r = run(t.Context(), append([]string{"dead", "list", "--db", db.dsn, "--json"}, args...)...)
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.JSONEq(t, "[]", r.stdout, "%v matches nothing", args)
	}
	r = run(t.Context(), "dead", "list", "--db", db.dsn, "--json", "--aggregate-id", "POISON-3", "--aggregate-type", "order")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"aggregate_id": "POISON-3"`)

	// dead show: one message in full.
	first := dead[0]
	r = run(t.Context(), "dead", "show", "--db", db.dsn, strconv.FormatInt(first.RowID, 10))
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^message id:\s+`+first.MessageID+`$`, r.stdout)
	require.Regexp(t, `(?m)^reason:\s+schema registry rejected the payload$`, r.stdout)
	require.Regexp(t, `(?m)^  tenant:\s+acme$`, r.stdout)
	require.Contains(t, r.stdout, "payload:\n{\n  \"n\": 0\n}\n")
	r = run(t.Context(), "dead", "show", "--db", db.dsn, "999999")
	require.Equal(t, ExitRuntime, r.code)
	require.Equal(t, "no dead message with row id 999999 in outbox_message", strings.TrimPrefix(requireOneLine(t, r), "outbox: "))

	// A bulk action refuses without --yes when nobody can answer, and a "no" changes nothing.
	r = runIn(t.Context(), notATerminal(t), "dead", "retry", "--db", db.dsn, "--event-type", "POISON")
	require.Equal(t, ExitUsage, r.code, r.stderr)
	require.Contains(t, requireOneLine(t, r), "stdin is not a terminal, so nobody can confirm; pass --yes")
	r = runIn(t.Context(), strings.NewReader("n\n"), "dead", "retry", "--db", db.dsn)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("retry %d dead messages of outbox_message? [y/N] ", poison), r.stderr)
	require.Equal(t, "not confirmed; nothing changed\n", r.stdout)
	r = run(t.Context(), "dead", "retry", "--db", db.dsn, "--dry-run")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, fmt.Sprintf("dry run: would have retried %d dead messages; nothing changed\n", poison))
	require.EqualValues(t, poison, status().Dead)

	// The publisher is fixed: retry two rows by id (--yes), then one (no question).
	pub.FailWith(nil)
	r = run(t.Context(), "dead", "retry", "--db", db.dsn, "--yes",
		strconv.FormatInt(dead[0].RowID, 10), strconv.FormatInt(dead[1].RowID, 10))
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Equal(t, "retried 2 dead messages\n", r.stdout)
	r = runIn(t.Context(), notATerminal(t), "dead", "retry", "--db", db.dsn, strconv.FormatInt(dead[2].RowID, 10))
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Equal(t, "retried 1 dead message\n", r.stdout)
	testsvc.Eventually(t, 20*time.Second, func() bool { return delivered(pub, "POISON") == 3 },
		"the relay delivers the retried messages")
	testsvc.Eventually(t, 10*time.Second, func() bool { return status().Pending == 0 }, "all acknowledged")
	require.EqualValues(t, poison-3, status().Dead)

	// discard: a dry run changes nothing; a confirmed one deletes.
	r = run(t.Context(), "dead", "discard", "--db", db.dsn, "--dry-run")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "dry run: would have discarded 2 dead messages; nothing changed\n")
	require.Contains(t, r.stdout, dead[3].MessageID)
	require.EqualValues(t, 2, status().Dead)
	r = runIn(t.Context(), strings.NewReader("yes\n"), "dead", "discard", "--db", db.dsn)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Equal(t, "discarded 2 dead messages\n", r.stdout)
	require.Zero(t, status().Dead)
	require.Equal(t, good+3, db.count(t, "outbox_message"))
	r = run(t.Context(), "dead", "discard", "--db", db.dsn, "--yes")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Equal(t, "no dead messages match; nothing changed\n", r.stdout)

	// archive, while the relay delivers a new burst: every sent row moves, 7 at a time.
	const burst = 30
	db.write(t, messagesOf("LATE", burst)...)
	archived, batches := 0, 0
	summary := regexp.MustCompile(`(?m)^(\d+) rows? archived into \S+ in (\d+) batch(es)?, `)
	testsvc.Eventually(t, 30*time.Second, func() bool {
		r := run(t.Context(), "archive", "--db", db.dsn, "--older-than", "0s", "--batch", "7")
		require.Equal(t, ExitOK, r.code, r.stderr)
		m := summary.FindStringSubmatch(r.stdout)
		require.NotNil(t, m, r.stdout)
		n, _ := strconv.Atoi(m[1])
		b, _ := strconv.Atoi(m[2])
		require.GreaterOrEqual(t, b, (n+6)/7, "at most 7 rows a batch")
		archived += n
		batches += b
		return status().Pending == 0 && db.count(t, "outbox_message") == 0
	}, "the relay delivers the burst and archive moves every sent row")
	require.Equal(t, good+3+burst, archived)
	require.GreaterOrEqual(t, batches, (archived+6)/7)
	require.Equal(t, good+3+burst, db.count(t, db.archive))
	require.Equal(t, burst, delivered(pub, "LATE"))
}

// TestArchiveDelete deletes sent rows instead of moving them, and leaves
// the rows that are too young.
func TestArchiveDelete(t *testing.T) {
	t.Parallel()
	db := sqliteAdminDB(t)
	db.write(t, messagesOf("A", 5)...)
	pub := outboxtest.NewPublisher()
	relay, err := outbox.NewRelay(db.store, pub, outbox.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	_, err = outboxtest.FlushAndWait(t.Context(), relay, db.store)
	require.NoError(t, err)

	r := run(t.Context(), "archive", "--db", db.dsn, "--older-than", "7d", "--delete")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Regexp(t, `^0 rows deleted in 0 batches, `, r.stdout)
	require.Equal(t, 5, db.count(t, "outbox_message"))

	r = run(t.Context(), "archive", "--db", db.dsn, "--older-than", "0", "--delete", "--batch", "2")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Regexp(t, `^5 rows deleted in 3 batches, `, r.stdout)
	require.Zero(t, db.count(t, "outbox_message"))
}

func TestParseAge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{in: "7d", want: 7 * 24 * time.Hour},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "90m", want: 90 * time.Minute},
		{in: "0s"},
		{in: "0"},
		{in: " 2d ", want: 48 * time.Hour},
		{in: "d", err: true},
		{in: "7days", err: true},
		{in: "-1h", err: true},
		{in: "1d-1h", err: true},
		{in: "", err: true},
		{in: "999999999d", err: true},
		{in: "-1d", err: true},
		{in: "106751d", want: 106751 * 24 * time.Hour},
		{in: "106752d", err: true}, // more than a time.Duration holds
	} {
		got, err := parseAge(tc.in)
		if tc.err {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestAdminBadInput(t *testing.T) {
	t.Parallel()
	dsn := "sqlite://" + testsvc.SQLitePath(t)
	require.Equal(t, ExitOK, run(t.Context(), "migrate", "--db", dsn).code)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"ArchiveNoAge", []string{"archive", "--db", dsn}, `Required flag "older-than" not set`},
		{"ArchiveBadAge", []string{"archive", "--db", dsn, "--older-than", "a week"}, `--older-than: "a week" is not an age (like 90m, 36h, 7d)`},
		{"ArchiveBadBatch", []string{"archive", "--db", dsn, "--older-than", "1h", "--batch", "0"}, "--batch: 0 is less than 1"},
		{"DeadBadRowID", []string{"dead", "retry", "--db", dsn, "12x"}, `"12x" is not a row id (a positive whole number)`},
		{"DeadShowNoID", []string{"dead", "show", "--db", dsn}, "dead show takes one row id (see outbox dead list)"},
		{"DeadListBadLimit", []string{"dead", "list", "--db", dsn, "--limit", "0"}, "--limit: 0 is not between 1 and 10000"},
		{"DeadBadAge", []string{"dead", "list", "--db", dsn, "--older-than", "old"}, `--older-than: "old" is not an age (like 90m, 36h, 7d)`},
		{"StatusBadInterval", []string{"status", "--db", dsn, "--watch", "--interval", "0s"}, "--interval: 0s is not positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := run(t.Context(), tc.args...)
			require.Equal(t, ExitUsage, r.code, r.stderr)
			require.Equal(t, "outbox: "+tc.want, requireOneLine(t, r))
		})
	}
}

// watchStopped waits for a cancelled status --watch to exit 0.
func watchStopped(t *testing.T, done <-chan int, errb *syncBuffer) {
	t.Helper()
	select {
	case code := <-done:
		require.Equal(t, ExitOK, code, errb.String())
	case <-time.After(10 * time.Second):
		t.Fatal("status --watch did not stop within 10 s of the cancel")
	}
}

// TestStatusWatch reprints the status until the context ends, then exits 0.
func TestStatusWatch(t *testing.T) {
	t.Parallel()
	db := sqliteAdminDB(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"outbox", "status", "--db", db.dsn, "--watch", "--json", "--interval", "20ms"}, &out, &errb)
	}()
	lines := func() []string { return strings.Split(strings.TrimSpace(out.String()), "\n") }
	testsvc.Eventually(t, 10*time.Second, func() bool { return len(lines()) >= 2 }, "two prints")
	db.write(t, messagesOf("A", 3)...)
	testsvc.Eventually(t, 10*time.Second, func() bool {
		var st statusJSON
		ls := lines()
		return json.Unmarshal([]byte(ls[len(ls)-1]), &st) == nil && st.Pending == 3
	}, "a later print shows the new rows")
	cancel()
	watchStopped(t, done, &errb)
	require.Empty(t, errb.String())
	for _, l := range lines() {
		var st statusJSON
		require.NoError(t, json.Unmarshal([]byte(l), &st), l)
		require.Equal(t, "outbox_message", st.Table)
	}

	// Without --json: a table under a time line, each interval.
	ctx2, cancel2 := context.WithCancel(t.Context())
	defer cancel2()
	var out2 syncBuffer
	go func() {
		done <- Main(ctx2, []string{"outbox", "status", "--db", db.dsn, "--watch", "--interval", "20ms"}, &out2, io.Discard)
	}()
	testsvc.Eventually(t, 10*time.Second, func() bool { return strings.Count(out2.String(), "pending  ") >= 2 }, "two tables")
	cancel2()
	require.Equal(t, ExitOK, <-done)
	require.Regexp(t, `(?m)^--- \d{4}-\d\d-\d\dT`, out2.String())
}

// TestDeadCommandsOmitHugePayloads: a dead row whose payload is larger than
// the dead commands read (a row the relay killed for its size) is listed and
// shown with its size, and its payload is not printed.
func TestDeadCommandsOmitHugePayloads(t *testing.T) {
	t.Parallel()
	db := sqliteAdminDB(t)
	db.write(t, messagesOf("HUGE", 1)...)
	c, err := db.store.Claim(t.Context(), outbox.ClaimParams{Limit: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, c.Messages, 1)
	require.NoError(t, db.store.Kill(t.Context(), outbox.KillParams{Dead: []outbox.Dead{{Message: c.Messages[0], Reason: "too big"}}}))
	const size = maxShownPayload + 2
	raw, err := sqlitestore.Open(strings.TrimPrefix(db.dsn, "sqlite://"))
	require.NoError(t, err)
	defer raw.Close()
	_, err = raw.ExecContext(t.Context(), "UPDATE outbox_message SET payload = ? WHERE id = ?",
		`"`+strings.Repeat("x", size-2)+`"`, c.Messages[0].RowID)
	require.NoError(t, err)
	id := strconv.FormatInt(c.Messages[0].RowID, 10)

	r := run(t.Context(), "dead", "show", "--db", db.dsn, id)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Less(t, len(r.stdout), 4096, "dead show printed the payload")
	require.Contains(t, r.stdout, fmt.Sprintf("payload: %d bytes, not shown (over %d)\n", size, maxShownPayload))

	r = run(t.Context(), "dead", "list", "--db", db.dsn, "--json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &listed))
	require.Len(t, listed, 1)
	require.Nil(t, listed[0]["payload"])
	require.EqualValues(t, size, listed[0]["payload_size"])
}

// TestDeadShowsExpired lets a message expire before a relay runs: the relay
// kills it, and dead list and dead show give the reason that starts with
// expired and its expiry.
func TestDeadShowsExpired(t *testing.T) {
	t.Parallel()
	eachAdminDB(t, func(t *testing.T, db adminDB) {
		exp := time.Now().Add(300 * time.Millisecond)
		m := &outbox.Message{AggregateType: "order", AggregateID: "1", EventType: "REMIND", Payload: []byte(`{}`), ExpiresAt: exp}
		db.write(t, m)
		testsvc.Eventually(t, 5*time.Second, func() bool { return time.Now().After(exp) }, "the expiry never passed")
		runRelay(t, db, outboxtest.NewPublisher())
		testsvc.Eventually(t, 20*time.Second, func() bool { return statusOf(t, "--db", db.dsn).Dead == 1 },
			"the expired message is not dead")

		r := run(t.Context(), "dead", "list", "--db", db.dsn, "--json")
		require.Equal(t, ExitOK, r.code, r.stderr)
		var dead []deadJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &dead), r.stdout)
		require.Len(t, dead, 1)
		require.Regexp(t, `^expired at `, dead[0].Reason)
		require.NotNil(t, dead[0].ExpiresAt)
		require.WithinDuration(t, exp, *dead[0].ExpiresAt, time.Millisecond)
		require.Nil(t, dead[0].DeliverAt)

		r = run(t.Context(), "dead", "show", "--db", db.dsn, strconv.FormatInt(dead[0].RowID, 10))
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Regexp(t, `(?m)^reason:\s+expired at `, r.stdout)
		require.Regexp(t, `(?m)^expires at:\s+`+exp.UTC().Format("2006-01-02T15:04:05"), r.stdout)
	})
}

func TestBehindText(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0"},
		{7, "7"},
		{outbox.MaxDeadBehind, "1000"},
		{outbox.MaxDeadBehind + 1, "1000+"},
	} {
		require.Equal(t, c.want, behindText(c.n), "%d", c.n)
	}
}
