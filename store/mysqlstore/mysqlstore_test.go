package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/internal/sqltest"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql closes connections in the background after db.Close.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}

// pastedDDL is the outbox table as teams paste it from the well-known MySQL
// write-ups: DATETIME with whole seconds, CURRENT_TIMESTAMP defaults, a JSON
// payload, and NULLs allowed where storetest plants malformed rows.
const pastedDDL = `CREATE TABLE %s (
  id             BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
  message_id     VARCHAR(64) UNIQUE COMMENT 'global id for consumer dedup',
  aggregate_type VARCHAR(64),
  aggregate_id   VARCHAR(64),
  event_type     VARCHAR(64),
  payload        JSON,
  status         TINYINT NOT NULL DEFAULT 0 COMMENT '0 pending, 1 sent, 2 failed',
  retry_count    INT NOT NULL DEFAULT 0,
  next_retry_at  DATETIME NULL,
  created_at     DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at     DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  INDEX idx_status_next_retry (status, next_retry_at),
  INDEX idx_aggregate (aggregate_type, aggregate_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`

// openDB returns a *sql.DB on a database of t's own, opened through Open so
// that the DSN helper is what the tests run on.
func openDB(t *testing.T) (*sql.DB, string) {
	t.Helper()
	_, dsn := testsvc.MySQLDatabase(t)
	db, err := mysqlstore.Open(dsn)
	require.NoError(t, err)
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	return db, dsn
}

func newStore(t *testing.T, opts ...mysqlstore.Option) (*mysqlstore.Store, *sql.DB) {
	t.Helper()
	db, _ := openDB(t)
	return sqltest.Migrated(t, mysqlstore.New, db, opts...)
}

// pastedStore returns a store on the pasted table, not migrated.
func pastedStore(t *testing.T) (*mysqlstore.Store, *sql.DB) {
	t.Helper()
	db, _ := openDB(t)
	return sqltest.OnTable(t, mysqlstore.New, db, fmt.Sprintf(pastedDDL, "outbox_message"))
}

func TestStore(t *testing.T) {
	storetest.RunSQL(t, storetest.SQLSuite[*mysqlstore.Store, mysqlstore.Option]{
		// Ordered claims return runs (runs.go). MariaDB's JSON column checks
		// JSON_VALID: TestMalformedRows plants invalid JSON in a LONGTEXT
		// table instead.
		Harness: storetest.Harness{Runs: true, Dialect: storetest.MySQL, InvalidJSON: false, Time: storetest.TextTime},
		New:     newStore, ChunkRows: mysqlstore.WithChunkRows, ContractOnly: pastedStore,
	})
}

func TestDSN(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, in string
		want     []string // substrings of the result
		notWant  []string
	}{
		{"DriverDSN", "app:pw@tcp(db:3306)/shop", []string{"app:pw@tcp(db:3306)/shop?", "parseTime=true", "time_zone=%27%2B00%3A00%27"}, nil},
		{"ParseTimeForced", "root@tcp(127.0.0.1:3306)/test?parseTime=false", []string{"parseTime=true"}, []string{"parseTime=false"}},
		{"OwnTimeZoneKept", "root@tcp(h:3306)/d?time_zone=%27Europe%2FParis%27", []string{"time_zone=%27Europe%2FParis%27"}, []string{"%2B00%3A00"}},
		{"OtherParamsKept", "root@tcp(h:3306)/d?timeout=5s&loc=Local", []string{"timeout=5s", "loc=Local", "parseTime=true"}, nil},
		{"Interpolates", "root@tcp(h:3306)/d", []string{"interpolateParams=true"}, nil},
		{"OwnInterpolationKept", "root@tcp(h:3306)/d?interpolateParams=false", nil, []string{"interpolateParams=true"}},
		{"URL", "mysql://app:p%40ss@db.example:3307/shop?timeout=2s", []string{"app:p@ss@tcp(db.example:3307)/shop?", "timeout=2s", "parseTime=true"}, nil},
		{"URLDefaultPort", "mysql://app@db/shop", []string{"app@tcp(db:3306)/shop?"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := mysqlstore.DSN(c.in)
			require.NoError(t, err)
			for _, w := range c.want {
				require.Contains(t, got, w)
			}
			for _, w := range c.notWant {
				require.NotContains(t, got, w)
			}
		})
	}
	t.Run("Invalid", func(t *testing.T) {
		for _, in := range []string{"not a dsn", "mysql://app:secret@db:3306/shop?timeout=never", "mysql://app:secret@[bad/shop"} {
			_, err := mysqlstore.DSN(in)
			require.Error(t, err, in)
			require.NotContains(t, err.Error(), "secret", "the error leaks the password")
		}
	})
}

// TestSQLStore runs the checks the database/sql stores share beyond
// storetest (sqltest.Run).
func TestSQLStore(t *testing.T) {
	sqltest.Run(t, sqltest.Harness[*mysqlstore.Store, mysqlstore.Option]{
		Database: func(t testing.TB) string {
			_, dsn := testsvc.MySQLDatabase(t)
			return dsn
		},
		Open:       mysqlstore.Open,
		New:        mysqlstore.New,
		WithTable:  mysqlstore.WithTable,
		ErrNoTable: mysqlstore.ErrNoTable,
		Migrators:  4,
		TableNames: []sqltest.TableName{
			{Name: "shop.outbox", OK: true},
			{Name: strings.Repeat("a", 64), OK: true},
			{Name: strings.Repeat("a", 65)},
			{Name: "`outbox`"},
			{Name: "outbox_message` WHERE 1=1; --"},
		},
		NoContractDDL: "CREATE TABLE outbox_message (id BIGINT PRIMARY KEY, message_id VARCHAR(64), payload JSON)",
		OrdersDDL:     "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(16)) ENGINE=InnoDB",
		// Rows that a hand-made LONGTEXT table can hold and a JSON column cannot.
		MalformedDDL: `CREATE TABLE outbox_message (
			id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(64), aggregate_type VARCHAR(64),
			aggregate_id VARCHAR(64), event_type VARCHAR(64), payload LONGTEXT, headers LONGBLOB, topic VARBINARY(255),
			status TINYINT NOT NULL DEFAULT 0, retry_count INT NOT NULL DEFAULT 0, next_retry_at DATETIME NULL,
			created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP, updated_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		Malformed: []sqltest.Malformed{{Name: "HeadersNotUTF8", AggID: "1", Payload: `{}`, Hdr: []byte("{\"k\":\"\xff\"}"),
			WantErr: "headers is not valid UTF-8"}},
	})
}

// TestMigrateUpgradesPastedTable migrates the pasted table: the columns and
// index it lacks are added, its own types and rows kept.
func TestMigrateUpgradesPastedTable(t *testing.T) {
	t.Parallel()
	s, db := pastedStore(t)
	types := func() map[string]string { return columnTypes(t, db, "outbox_message") }
	sqltest.MigrateUpgrades(t, s, db, func() []string { return slices.Collect(maps.Keys(types())) }, func() {
		require.Equal(t, "datetime", types()["next_retry_at"], "Migrate keeps the table's own column types")
		var idx int
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = 'outbox_message' AND index_name = 'idx_status_id'`).Scan(&idx))
		require.Equal(t, 2, idx, "the (status, id) index is added")
	})
}

// TestClaimSkipsLockedRows holds row locks in another transaction, as a
// claim in flight would, and checks that a claim takes the next rows
// without waiting for them.
func TestClaimSkipsLockedRows(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		store func(t *testing.T) (*mysqlstore.Store, *sql.DB)
	}{
		{"Migrated", func(t *testing.T) (*mysqlstore.Store, *sql.DB) { return newStore(t) }},
		{"PastedAfterMigrate", func(t *testing.T) (*mysqlstore.Store, *sql.DB) {
			s, db := pastedStore(t)
			require.NoError(t, s.Migrate(t.Context()))
			return s, db
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, db := c.store(t)
			ctx := t.Context()
			ms := make([]*outbox.Message, 10)
			for i := range ms {
				ms[i] = sqltest.Msg("order", fmt.Sprint(i))
			}
			require.NoError(t, sqltest.Write(db, s)(ctx, ms...))
			ids := rowIDs(t, db)

			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			require.NoError(t, err)
			defer tx.Rollback() //nolint:errcheck
			// Through the primary key only: a covering scan of another index
			// would lock that index's entries of every row.
			rows, err := tx.QueryContext(ctx, "SELECT id FROM outbox_message FORCE INDEX (PRIMARY) WHERE id IN (?, ?, ?) FOR UPDATE",
				ids[0], ids[1], ids[2])
			require.NoError(t, err)
			rows.Close()

			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			cl, err := s.Claim(cctx, outbox.ClaimParams{Limit: 3, Lease: time.Hour})
			require.NoError(t, err, "the claim waited for locked rows")
			require.Equal(t, ids[3:6], claimedIDs(cl))
			cl, err = s.Claim(cctx, outbox.ClaimParams{Limit: 3, Lease: time.Hour})
			require.NoError(t, err)
			require.Equal(t, ids[6:9], claimedIDs(cl), "the first claim's rows are leased, the locked ones still held")
			require.NoError(t, tx.Rollback())
			cl, err = s.Claim(cctx, outbox.ClaimParams{Limit: 10, Lease: time.Hour})
			require.NoError(t, err)
			require.Equal(t, append(ids[:3:3], ids[9]), claimedIDs(cl), "released rows are claimable")
		})
	}
}

// TestPastedTableSecondsPrecision runs the lease and the retry time on the
// pasted table, whose DATETIME columns keep whole seconds.
func TestPastedTableSecondsPrecision(t *testing.T) {
	t.Parallel()
	s, db := pastedStore(t)
	ctx := t.Context()
	before := time.Now().Truncate(time.Second)
	require.NoError(t, sqltest.Write(db, s)(ctx, sqltest.Msg("a", "1"), sqltest.Msg("a", "2")))

	lease := 2 * time.Second
	start := time.Now() // before the claim: the lease's end is cut to the second below
	cl, err := s.Claim(ctx, outbox.ClaimParams{Limit: 1, Lease: lease})
	require.NoError(t, err)
	require.Len(t, cl.Messages, 1)
	m := cl.Messages[0]
	require.WithinRange(t, m.CreatedAt, before, time.Now().Add(time.Second), "created_at has whole seconds, in UTC")
	c2, err := s.Claim(ctx, outbox.ClaimParams{Limit: 1, Lease: lease})
	require.NoError(t, err)
	require.Len(t, c2.Messages, 1)
	require.NotEqual(t, m.RowID, c2.Messages[0].RowID, "the leased row is skipped")

	var again *outbox.Claim
	testsvc.Eventually(t, 10*time.Second, func() bool {
		again, err = s.Claim(ctx, outbox.ClaimParams{Limit: 1, Lease: time.Hour})
		require.NoError(t, err)
		return len(again.Messages) == 1
	}, "the lease of %v never ended", lease)
	require.GreaterOrEqual(t, time.Since(start), lease-time.Second, "the lease ended more than its 1 s resolution early")
	require.Equal(t, m.RowID, again.Messages[0].RowID)
	require.Equal(t, 2, again.Messages[0].Attempt)

	at := time.Now().Add(time.Hour).Truncate(time.Second).Add(700 * time.Millisecond)
	require.NoError(t, s.Reschedule(ctx, outbox.RescheduleParams{Retries: []outbox.Retry{{Message: again.Messages[0], At: at, Err: "later"}}}))
	var next time.Time
	require.NoError(t, db.QueryRow("SELECT next_retry_at FROM outbox_message WHERE id = ?", m.RowID).Scan(&next))
	require.WithinDuration(t, at, next, time.Second, "next_retry_at keeps the seconds")
}

// TestSessionTimeZone runs the store on sessions in other time zones, with
// the driver's loc set to match or not: leases, retries and ages must not
// move by the zone's offset.
func TestSessionTimeZone(t *testing.T) {
	t.Parallel()
	for _, params := range []string{
		"time_zone=%27-07:00%27",
		"time_zone=%27%2B09:30%27&loc=Local",
	} {
		t.Run(params, func(t *testing.T) {
			t.Parallel()
			_, dsn := openDB(t)
			db, err := mysqlstore.Open(dsn + "&" + params)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			s, err := mysqlstore.New(db)
			require.NoError(t, err)
			ctx := t.Context()
			require.NoError(t, s.Migrate(ctx))
			require.NoError(t, sqltest.Write(db, s)(ctx, sqltest.Msg("a", "1"), sqltest.Msg("a", "2")))

			cl, err := s.Claim(ctx, outbox.ClaimParams{Limit: 1, Lease: time.Hour})
			require.NoError(t, err)
			require.Len(t, cl.Messages, 1)
			require.WithinDuration(t, time.Now(), cl.Messages[0].CreatedAt, 5*time.Second)
			// An hour's lease in a -07:00 session must not look expired.
			cl2, err := s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Hour})
			require.NoError(t, err)
			require.Len(t, cl2.Messages, 1, "only the second row")

			require.NoError(t, s.Reschedule(ctx, outbox.RescheduleParams{Retries: []outbox.Retry{
				{Message: cl.Messages[0], At: time.Now().Add(-time.Second)},
				{Message: cl2.Messages[0], At: time.Now().Add(30 * time.Minute)},
			}}))
			cl3, err := s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Hour})
			require.NoError(t, err)
			require.Equal(t, claimedIDs(cl)[:1], claimedIDs(cl3), "the row due a second ago, not the one due in 30 minutes")

			require.Equal(t, 1, ack(t, s, cl3.Messages...))
			st, err := s.Stats(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 1, st.SentLastMinute)
			require.Less(t, st.OldestPending, time.Minute)
		})
	}
}

func ack(t *testing.T, s *mysqlstore.Store, msgs ...*outbox.Message) int {
	t.Helper()
	n, err := s.Ack(t.Context(), outbox.AckParams{Messages: msgs})
	require.NoError(t, err)
	return n
}

func rowIDs(t *testing.T, db *sql.DB) []int64 {
	t.Helper()
	rows, err := db.Query("SELECT id FROM outbox_message ORDER BY id")
	require.NoError(t, err)
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

func claimedIDs(c *outbox.Claim) []int64 {
	ids := make([]int64, len(c.Messages))
	for i, m := range c.Messages {
		ids[i] = m.RowID
	}
	return ids
}

func columnTypes(t *testing.T, db *sql.DB, table string) map[string]string {
	t.Helper()
	rows, err := db.Query(`SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = ?`, table)
	require.NoError(t, err)
	defer rows.Close()
	cols := map[string]string{}
	for rows.Next() {
		var c, typ string
		require.NoError(t, rows.Scan(&c, &typ))
		cols[strings.ToLower(c)] = strings.ToLower(typ)
	}
	require.NoError(t, rows.Err())
	return cols
}
