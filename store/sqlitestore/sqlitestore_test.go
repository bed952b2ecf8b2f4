package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/internal/sqltest"
	"github.com/outboxkit/outbox/store/sqlitestore"
	"github.com/outboxkit/outbox/store/storetest"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(runChildClaimer(path))
	}
	goleak.VerifyTestMain(m)
}

// contractDDL is a table as a team might have made it by hand before
// adopting the library: only the contract columns, DATETIME columns with
// CURRENT_TIMESTAMP defaults, a JSON-typed payload (NUMERIC affinity in
// SQLite), and NULLs allowed where storetest plants malformed rows.
const contractDDL = `
CREATE TABLE %[1]s (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id     VARCHAR(64) UNIQUE,
    aggregate_type VARCHAR(64),
    aggregate_id   VARCHAR(64),
    event_type     VARCHAR(64),
    payload        JSON,
    status         SMALLINT NOT NULL DEFAULT 0,
    retry_count    INT      NOT NULL DEFAULT 0,
    next_retry_at  DATETIME NULL,
    created_at     DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at     DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);
CREATE INDEX %[1]s_status_next_retry ON %[1]s (status, next_retry_at);
CREATE INDEX %[1]s_aggregate ON %[1]s (aggregate_type, aggregate_id);`

// openDB opens a fresh database file for t with Open's settings.
func openDB(t *testing.T) (*sql.DB, string) {
	t.Helper()
	path := testsvc.SQLitePath(t)
	db, err := sqlitestore.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db, path
}

// newStore returns a migrated store on a fresh file.
func newStore(t *testing.T, opts ...sqlitestore.Option) (*sqlitestore.Store, *sql.DB) {
	t.Helper()
	db, _ := openDB(t)
	return sqltest.Migrated(t, sqlitestore.New, db, opts...)
}

// retryBusy makes write try again, up to five more times, when SQLite
// reports the database busy: in the suite's RelaysEndToEnd, four writers
// and three relays contend for SQLite's one write lock, and on a loaded
// machine a writer can lose it for longer than busy_timeout; it then does
// what a service would, and tries the transaction again.
func retryBusy(write func(ctx context.Context, msgs ...*outbox.Message) error) func(ctx context.Context, msgs ...*outbox.Message) error {
	return func(ctx context.Context, msgs ...*outbox.Message) error {
		err := write(ctx, msgs...)
		for try := 0; isBusy(err) && try < 5; try++ {
			err = write(ctx, msgs...)
		}
		return err
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY.
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// handMadeStore returns a Store on the table outbox_message made with
// contractDDL, not migrated.
func handMadeStore(t *testing.T) (*sqlitestore.Store, *sql.DB) {
	t.Helper()
	db, _ := openDB(t)
	return sqltest.OnTable(t, sqlitestore.New, db, fmt.Sprintf(contractDDL, "outbox_message"))
}

func TestStore(t *testing.T) {
	storetest.RunSQL(t, storetest.SQLSuite[*sqlitestore.Store, sqlitestore.Option]{
		// Ordered claims return runs (runs.go).
		Harness: storetest.Harness{Runs: true, Dialect: storetest.SQLite, InvalidJSON: true, Time: storetest.TextTime},
		New:     newStore, ChunkRows: sqlitestore.WithChunkRows, Write: retryBusy,
		ContractOnly: func(t *testing.T) (*sqlitestore.Store, *sql.DB) {
			db, _ := openDB(t)
			return sqltest.OnTable(t, sqlitestore.New, db, fmt.Sprintf(contractDDL, "legacy_outbox"),
				sqlitestore.WithTable("legacy_outbox"))
		},
	})
}

// TestQualifiedTable goes through every statement on a schema-qualified,
// mixed-case table name that is not the default.
func TestQualifiedTable(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, sqlitestore.WithTable("main.Events_Outbox_2"))
	ctx := t.Context()
	require.NoError(t, s.Migrate(ctx), "twice")
	require.NoError(t, sqltest.Write(db, s)(ctx, sqltest.Msg("a", "1"), sqltest.Msg("a", "1"), sqltest.Msg("b", "1"), sqltest.Msg("c", "1")))
	require.Equal(t, 4, sqltest.Count(t, db, `main."Events_Outbox_2"`))

	c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 3, Lease: time.Hour, Ordered: true, BlockOnDead: true})
	require.NoError(t, err)
	require.Len(t, c.Messages, 3, "the runs of a and b, up to the limit")
	ms := c.Messages
	n, err := s.Ack(ctx, outbox.AckParams{Messages: ms[:1]})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = s.Ack(ctx, outbox.AckParams{Messages: ms[1:2], Delete: true})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, s.Kill(ctx, outbox.KillParams{Dead: []outbox.Dead{{Message: ms[2], Reason: "x"}}}))
	c, err = s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, c.Messages, 1, "the row of c")
	require.NoError(t, s.Reschedule(ctx, outbox.RescheduleParams{Retries: []outbox.Retry{{Message: c.Messages[0], At: time.Now(), Err: "y"}}}))
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Less(t, st.OldestPending, time.Minute)
	st.OldestPending = 0
	require.Equal(t, outbox.Stats{Pending: 1, Dead: 1, SentLastMinute: 1, SentLastHour: 1}, *st)
}

func TestHostileTableNameNeverReachesTheDatabase(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	write := sqltest.Write(db, s)
	require.NoError(t, write(t.Context(), &outbox.Message{AggregateType: "a", AggregateID: "1", EventType: "E", Payload: []byte(`{}`)}))
	for _, name := range []string{
		"outbox_message; DROP TABLE outbox_message",
		`outbox_message" WHERE 1=1; --`,
		"outbox_message/**/",
	} {
		_, err := sqlitestore.New(db, sqlitestore.WithTable(name))
		require.Error(t, err, name)
	}
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM outbox_message").Scan(&n))
	require.Equal(t, 1, n, "the table is intact")
}

func TestOpen(t *testing.T) {
	t.Parallel()
	t.Run("PragmasOnEveryConnection", func(t *testing.T) {
		t.Parallel()
		db, _ := openDB(t)
		ctx := t.Context()
		// Hold several connections at once so that the pool must open each.
		conns := make([]*sql.Conn, 4)
		for i := range conns {
			c, err := db.Conn(ctx)
			require.NoError(t, err)
			conns[i] = c
		}
		for i, c := range conns {
			for _, p := range []struct {
				pragma string
				want   string
			}{
				{"journal_mode", "wal"},
				{"synchronous", "2"}, // FULL
				{"busy_timeout", "5000"},
				{"foreign_keys", "1"},
			} {
				var got string
				require.NoError(t, c.QueryRowContext(ctx, "PRAGMA "+p.pragma).Scan(&got))
				require.Equal(t, p.want, strings.ToLower(got), "connection %d: %s", i, p.pragma)
			}
			require.NoError(t, c.Close())
		}
	})
	t.Run("RejectsMemoryAndEmpty", func(t *testing.T) {
		t.Parallel()
		for _, p := range []string{"", ":memory:", "file::memory:?cache=shared"} {
			_, err := sqlitestore.Open(p)
			require.Error(t, err, "%q", p)
		}
	})
	t.Run("PathWithURICharacters", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "a?b#c%20d.db")
		db, err := sqlitestore.Open(path)
		require.NoError(t, err)
		defer db.Close()
		_, err = db.Exec("CREATE TABLE x (y INTEGER)")
		require.NoError(t, err)
		_, err = os.Stat(path)
		require.NoError(t, err, "the file is at the path as given")
	})
	t.Run("UnreachablePathFails", func(t *testing.T) {
		t.Parallel()
		_, err := sqlitestore.Open(filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"))
		require.Error(t, err)
	})
}

// TestSQLStore runs the checks the database/sql stores share beyond
// storetest (sqltest.Run).
func TestSQLStore(t *testing.T) {
	sqltest.Run(t, sqltest.Harness[*sqlitestore.Store, sqlitestore.Option]{
		Database:   testsvc.SQLitePath,
		Open:       sqlitestore.Open,
		New:        sqlitestore.New,
		WithTable:  sqlitestore.WithTable,
		ErrNoTable: sqlitestore.ErrNoTable,
		Migrators:  6,
		TableNames: []sqltest.TableName{
			{Name: "main.outbox", OK: true},
			{Name: strings.Repeat("a", 63), OK: true},
			{Name: strings.Repeat("a", 64)},
			{Name: "robert'); DROP TABLE students;--"},
			{Name: "sqlite_master"},
			{Name: "main.SQLITE_schema"},
		},
		NoContractDDL: "CREATE TABLE outbox_message (id INTEGER PRIMARY KEY, message_id TEXT, payload TEXT)",
		OrdersDDL:     "CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT)",
		// Columns without types: bytes that are not UTF-8, headers that are
		// not an object of strings, empty required columns, and numbers where
		// text belongs.
		MalformedDDL: `CREATE TABLE outbox_message (
			id INTEGER PRIMARY KEY AUTOINCREMENT, message_id, aggregate_type, aggregate_id, event_type, payload,
			headers, topic, partition_key,
			status INTEGER NOT NULL DEFAULT 0, retry_count INTEGER NOT NULL DEFAULT 0, next_retry_at,
			created_at NOT NULL DEFAULT CURRENT_TIMESTAMP, updated_at NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
		Malformed: []sqltest.Malformed{
			{Name: "NumbersAreText", AggID: int64(42), Payload: int64(7), Check: func(t *testing.T, m *outbox.Message) {
				require.Equal(t, "42", m.AggregateID)
				require.JSONEq(t, `7`, string(m.Payload))
			}},
			{Name: "PayloadBlobJSON", AggID: "1", Payload: []byte(`{"b":true}`)},
			{Name: "PayloadNotUTF8", AggID: "1", Payload: []byte("\"\xff\xfe\""), WantErr: "payload is not valid UTF-8"},
			{Name: "AggregateIDNotUTF8", AggID: []byte("\xff"), Payload: `{}`, WantErr: "aggregate_id is not valid UTF-8"},
			{Name: "HeadersNotStrings", AggID: "1", Payload: `{}`, Hdr: `{"k":1}`, WantErr: "headers are not a JSON object of strings"},
		},
	})
}

// TestMigrateUpgradesHandMadeTable migrates a table made by hand with the
// contract's columns only: the columns and index it lacks are added, its
// rows kept, and the store then writes and reads the new columns.
func TestMigrateUpgradesHandMadeTable(t *testing.T) {
	t.Parallel()
	s, db := handMadeStore(t)
	sqltest.MigrateUpgrades(t, s, db, func() []string { return tableColumns(t, db, "outbox_message") }, func() {
		var idx int
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'outbox_message_pending'`).Scan(&idx))
		require.Equal(t, 1, idx, "the pending index is added")
	})
}

func tableColumns(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.Query("SELECT name FROM pragma_table_info(?)", table)
	require.NoError(t, err)
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		require.NoError(t, rows.Scan(&c))
		cols = append(cols, c)
	}
	require.NoError(t, rows.Err())
	return cols
}

// TestTimeFormats plants next_retry_at values in the formats other programs
// may write into a hand-made table and checks which rows are due.
func TestTimeFormats(t *testing.T) {
	t.Parallel()
	s, db := handMadeStore(t)
	ctx := t.Context()

	now := time.Now().UTC()
	past, future := now.Add(-time.Hour), now.Add(time.Hour)
	cases := []struct {
		name string
		v    any
		due  bool
	}{
		{"Null", nil, true},
		{"CurrentTimestampPast", past.Format("2006-01-02 15:04:05"), true},
		{"CurrentTimestampFuture", future.Format("2006-01-02 15:04:05"), false},
		{"MicrosPast", past.Format("2006-01-02 15:04:05.000000"), true},
		{"MicrosFuture", future.Format("2006-01-02 15:04:05.000000"), false},
		{"ISOWithZPast", past.Format("2006-01-02T15:04:05.000Z"), true},
		{"ISOWithZFuture", future.Format("2006-01-02T15:04:05.000Z"), false},
		// 30 minutes ago in UTC, written as local time of UTC+02:00: due.
		{"OffsetPast", now.Add(-30 * time.Minute).In(time.FixedZone("", 2*3600)).Format("2006-01-02 15:04:05-07:00"), true},
		// 30 minutes ahead in UTC, written in UTC-05:00; read as UTC text it would look due.
		{"OffsetFuture", now.Add(30 * time.Minute).In(time.FixedZone("", -5*3600)).Format("2006-01-02T15:04:05-07:00"), false},
		{"UnixSecondsPast", past.Unix(), true},
		{"UnixSecondsFuture", future.Unix(), false},
		{"Garbage", "not a time", true},
	}
	ids := map[int64]string{}
	for _, c := range cases {
		res, err := db.ExecContext(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, next_retry_at)
			VALUES (?, 'a', ?, 'E', '{}', ?)`, c.name, c.name, c.v)
		require.NoError(t, err)
		id, err := res.LastInsertId()
		require.NoError(t, err)
		ids[id] = c.name
	}
	cl, err := s.Claim(ctx, outbox.ClaimParams{Limit: 100, Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, cl.Malformed)
	got := map[string]bool{}
	for _, m := range cl.Messages {
		got[ids[m.RowID]] = true
	}
	for _, c := range cases {
		require.Equal(t, c.due, got[c.name], "%s (%v) due", c.name, c.v)
	}
}
