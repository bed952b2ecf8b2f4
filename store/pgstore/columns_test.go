package pgstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
	"github.com/outboxkit/outbox/store/storetest"
)

// renamed maps every contract column to another name: the message columns
// as Debezium's outbox router names them, the others with an ob_ prefix.
var renamed = pgstore.RenamedColumns()

// mappedTable creates, in pool's schema, the table a migrated Store makes,
// renames its columns as renamed says, and returns a Store on it.
func mappedTable(t *testing.T, pool *pgxpool.Pool, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	newStore(t, pool, pgstore.WithTable("mapped_outbox"))
	var alter []string
	for c, to := range renamed {
		if c != to {
			alter = append(alter, fmt.Sprintf("ALTER TABLE mapped_outbox RENAME COLUMN %s TO %s", c, to))
		}
	}
	exec(t, pool, strings.Join(alter, "; "))
	s, err := pgstore.New(pool, append([]pgstore.Option{pgstore.WithTable("mapped_outbox"), pgstore.WithColumns(renamed)},
		opts...)...)
	require.NoError(t, err)
	require.NoError(t, s.CheckTable(t.Context()))
	return s
}

// TestStoreMappedColumns runs the conformance suite on a table whose
// columns all have other names, read through WithColumns: with Migrate's
// claim indexes, and with only the contract's (the claims then read the
// (status, next_retry_at) index). The suite's own SQL, written with the
// contract's names, reaches the table through mappedDB.
func TestStoreMappedColumns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, ddl string }{
		{"MigratedIndexes", ""},
		{"ContractIndexes", "DROP INDEX mapped_outbox_pending_idx; DROP INDEX mapped_outbox_head_idx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, mappedHarness(tc.ddl))
		})
	}
}

// TestHostileRowsMappedHeldClaims runs storetest's hostile rows on a mapped
// table with held claims, as TestHostileRowsEachClaim does on the
// contract's table.
func TestHostileRowsMappedHeldClaims(t *testing.T) {
	t.Parallel()
	storetest.RunHostileRows(t, mappedHarness("", pgstore.WithHeldClaims(true)))
}

// mappedHarness is storetest's harness for Stores with opts on a mapped
// table (mappedTable), on which ddl runs first.
func mappedHarness(ddl string, opts ...pgstore.Option) storetest.Harness {
	return storetest.Harness{
		Dialect: storetest.Postgres,
		Runs:    true,
		New: func(t *testing.T) *storetest.Fixture {
			pool, _, _ := testsvc.PostgresSchema(t)
			s := mappedTable(t, pool, opts...)
			if ddl != "" {
				exec(t, pool, ddl)
			}
			w := outbox.NewWriter(s)
			return &storetest.Fixture{
				Store: s,
				Write: func(ctx context.Context, msgs ...*outbox.Message) error {
					return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
				},
				DB:    mappedDB(t, pool, renamed),
				Table: "mapped_outbox",
			}
		},
	}
}

// mappedDB returns a database/sql handle on pool whose statements are
// rewritten for the table mapped by cols, as the Store rewrites its own.
func mappedDB(t testing.TB, pool *pgxpool.Pool, cols map[string]string) *sql.DB {
	db := sql.OpenDB(mappedConnector{stdlib.GetPoolConnector(pool), cols})
	t.Cleanup(func() { db.Close() })
	return db
}

type mappedConnector struct {
	driver.Connector
	cols map[string]string
}

func (c mappedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return mappedConn{conn, c.cols}, nil
}

// mappedConn rewrites every statement it prepares; database/sql prepares
// each query of a connection that runs none directly.
type mappedConn struct {
	driver.Conn
	cols map[string]string
}

func (c mappedConn) Prepare(q string) (driver.Stmt, error) {
	return c.Conn.Prepare(pgstore.MapSQL(c.cols, q))
}

func (c mappedConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, pgstore.MapSQL(c.cols, q))
}

func (c mappedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c mappedConn) CheckNamedValue(v *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(v)
}

func (c mappedConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

// TestColumnMappings checks the mappings New refuses and a mapped column
// the table lacks (storetest.RunColumnMappings).
func TestColumnMappings(t *testing.T) {
	t.Parallel()
	storetest.RunColumnMappings(t, storetest.ColumnsHarness{
		Renamed: renamed,
		New: func(t *testing.T) func(cols map[string]string) (storetest.MappedStore, error) {
			pool, _, _ := testsvc.PostgresSchema(t)
			return func(cols map[string]string) (storetest.MappedStore, error) {
				return pgstore.New(pool, pgstore.WithColumns(cols))
			}
		},
		Mapped: func(t *testing.T, cols map[string]string) (storetest.MappedStore, error) {
			pool, _, _ := testsvc.PostgresSchema(t)
			mappedTable(t, pool)
			return pgstore.New(pool, pgstore.WithTable("mapped_outbox"), pgstore.WithColumns(cols))
		},
	})
}

// TestNewRefusesOptionsWithColumns checks the options New refuses with
// WithColumns, each named in the error.
func TestNewRefusesOptionsWithColumns(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	for _, tc := range []struct {
		name string
		opt  pgstore.Option
		want string
	}{
		{"BatchLease", pgstore.WithBatchLease(true), "WithBatchLease"},
		{"NotifyTrigger", pgstore.WithNotifyTrigger(true), "WithNotifyTrigger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pgstore.New(pool, pgstore.WithColumns(renamed), tc.opt)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestMappedArchiveKeepsEveryColumn checks that Archive on a mapped table
// moves the columns the mapping does not name too.
func TestMappedArchiveKeepsEveryColumn(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	s := mappedTable(t, pool)
	exec(t, pool, "ALTER TABLE mapped_outbox ADD COLUMN tenant text")
	ctx := t.Context()
	w := outbox.NewWriter(s)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msg("a-1")) }))
	exec(t, pool, "UPDATE mapped_outbox SET tenant = 'acme', ob_status = 1, ob_updated_at = now() - interval '2 days'")
	n, err := s.Archive(ctx, outbox.ArchiveParams{OlderThan: time.Hour, Batch: 10})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, 1, count(t, pool, "SELECT count(*) FROM mapped_outbox_archive WHERE tenant = 'acme' AND aggregateid = 'a-1'"))
	require.Zero(t, count(t, pool, "SELECT count(*) FROM mapped_outbox"))
}

// TestMappedMissingIndexes checks that the index advice for a mapped table
// names its columns: each statement creates an index the claims then use.
func TestMappedMissingIndexes(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	s := mappedTable(t, pool)
	exec(t, pool, "DROP INDEX mapped_outbox_pending_idx; DROP INDEX mapped_outbox_head_idx")
	missing, err := s.MissingIndexes(t.Context())
	require.NoError(t, err)
	require.Len(t, missing, 2)
	for _, p := range missing {
		require.Contains(t, p.Fix, `"ob_status"`)
		require.NotContains(t, p.Fix, " status ")
		exec(t, pool, p.Fix)
	}
	missing, err = s.MissingIndexes(t.Context())
	require.NoError(t, err)
	require.Empty(t, missing)
	w := outbox.NewWriter(s)
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return w.Write(t.Context(), tx, msg("a-1")) }))
	c, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: 10, Lease: time.Minute, Ordered: true})
	require.NoError(t, err)
	require.Len(t, c.Messages, 1, "an ordered claim through the head index")
}
