package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/claimindex"
	"github.com/outboxkit/outbox/store/mysqlstore"
	"github.com/outboxkit/outbox/store/pgstore"
)

// The names the harness gives things in its private databases.
const (
	outboxTable = "outbox_message" // the relay's default table
	relayUser   = "relay"          // the account the relay processes log in as
	eventType   = "ITEM_ADDED"     // every message's event type, so one stream holds them all
)

// dbOptions are what a cell asks of its database beyond the defaults.
type dbOptions struct {
	logical bool // PostgreSQL with wal_level = logical, for CDC relays
	// deleteRows makes the Writer delete each outbox row in its own
	// transaction (outbox.WithDeleteAfterInsert): the message is in the
	// log only, for CDC relays.
	deleteRows bool
	// contractIndexes drops the indexes Migrate adds for claims, leaving
	// the contract's two, as on a table a team made by hand; the store
	// must then list both as missing.
	contractIndexes bool
}

// database is a private database server holding the scenario's schema: the
// business tables, the outbox table (created by the store's own Migrate),
// and an account for the relays so their connections can be told apart.
type database struct {
	kind     string // "postgres" or "mysql"
	srv      *server
	driver   string // database/sql driver
	dsn      string // the harness's account on the scenario's database
	relayDSN string // for `outbox relay --db`
	writer   *outbox.Writer[*sql.Tx]
}

// newDatabase starts a private server of kind allowing maxConns
// connections, and creates the schema with aggs business aggregates (and
// hogAggs more for long transactions), with the options of the cell.
func newDatabase(t *testing.T, kind, dir string, maxConns, aggs int, opts dbOptions) *database {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := &database{kind: kind}
	switch kind {
	case "postgres":
		srv, dsn := startPostgres(t, dir, maxConns, opts.logical)
		d.srv, d.driver, d.dsn = srv, "pgx", dsn
		d.relayDSN = fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", relayUser, srv.port)
		d.exec(t, ctx, "CREATE ROLE "+relayUser+" LOGIN SUPERUSER",
			"CREATE TABLE chaos_agg (agg varchar(32) PRIMARY KEY, seq bigint NOT NULL DEFAULT 0)",
			"CREATE TABLE chaos_event (message_id varchar(64) PRIMARY KEY, agg varchar(32) NOT NULL, "+
				"seq bigint NOT NULL, UNIQUE (agg, seq))")
		pool, err := pgxpool.New(ctx, dsn)
		require.NoError(t, err)
		st, err := pgstore.New(pool, pgstore.WithTable(outboxTable))
		require.NoError(t, err)
		require.NoError(t, st.Migrate(ctx))
		if opts.contractIndexes {
			require.NoError(t, claimindex.Drop(ctx, kind, outboxTable, func(ctx context.Context, q string) error {
				_, err := pool.Exec(ctx, q)
				return err
			}, st))
		}
		pool.Close() // the writer below goes through database/sql transactions
		var wopts []outbox.WriterOption
		if opts.deleteRows {
			wopts = append(wopts, outbox.WithDeleteAfterInsert())
		}
		d.writer = outbox.NewWriter(st.SQLTx(), wopts...)
	case "mysql":
		srv, admin := startMySQL(t, dir, maxConns)
		d.srv, d.driver = srv, "mysql"
		adm, err := sql.Open("mysql", admin)
		require.NoError(t, err)
		defer adm.Close()
		for _, q := range []string{
			"CREATE DATABASE chaos CHARACTER SET utf8mb4",
			"CREATE USER '" + relayUser + "'@'127.0.0.1'",
			"GRANT ALL ON chaos.* TO '" + relayUser + "'@'127.0.0.1'",
		} {
			_, err := adm.ExecContext(ctx, q)
			require.NoError(t, err, q)
		}
		d.dsn, err = mysqlstore.DSN(fmt.Sprintf("root@tcp(127.0.0.1:%d)/chaos?timeout=5s", srv.port))
		require.NoError(t, err)
		d.relayDSN = fmt.Sprintf("mysql://%s@127.0.0.1:%d/chaos", relayUser, srv.port)
		d.exec(t, ctx,
			"CREATE TABLE chaos_agg (agg varchar(32) PRIMARY KEY, seq bigint NOT NULL DEFAULT 0) ENGINE=InnoDB",
			"CREATE TABLE chaos_event (message_id varchar(64) PRIMARY KEY, agg varchar(32) NOT NULL, "+
				"seq bigint NOT NULL, UNIQUE (agg, seq)) ENGINE=InnoDB")
		db := d.open(2)
		defer db.Close()
		st, err := mysqlstore.New(db, mysqlstore.WithTable(outboxTable))
		require.NoError(t, err)
		require.NoError(t, st.Migrate(ctx))
		if opts.contractIndexes {
			require.NoError(t, claimindex.Drop(ctx, kind, outboxTable, func(ctx context.Context, q string) error {
				_, err := db.ExecContext(ctx, q)
				return err
			}, st))
		}
		d.writer = outbox.NewWriter(st) // InsertTx only uses the caller's transaction
	default:
		t.Fatalf("unknown database %q", kind)
	}
	var values []string
	for i := range aggs {
		values = append(values, fmt.Sprintf("('%s', 0)", aggName(i)))
	}
	for i := range hogAggs {
		values = append(values, fmt.Sprintf("('%s', 0)", hogAggName(i)))
	}
	d.exec(t, ctx, "INSERT INTO chaos_agg (agg, seq) VALUES "+strings.Join(values, ", "))
	return d
}

// aggName names business aggregate i.
func aggName(i int) string { return fmt.Sprintf("a%03d", i) }

// hogAggs are aggregates of their own for the long transactions (the
// longtx scenario), so that the producers never wait for their locks.
const hogAggs = 5

// hogAggName names long-transaction aggregate i.
func hogAggName(i int) string { return fmt.Sprintf("h%03d", i) }

// exec runs statements on a fresh connection, failing t on error.
func (d *database) exec(t *testing.T, ctx context.Context, stmts ...string) {
	t.Helper()
	db := d.open(1)
	defer db.Close()
	for _, q := range stmts {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
}

// open returns a pool of at most n connections that it keeps open (no
// idle or lifetime limit), so a pool warmed before a connection storm
// keeps serving through it.
func (d *database) open(n int) *sql.DB {
	db, err := sql.Open(d.driver, d.dsn)
	if err != nil {
		panic(fmt.Sprintf("sql.Open(%s): %v", d.driver, err)) // only a malformed DSN, which we built
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db
}

// q rewrites the ? placeholders of a statement for the database.
func (d *database) q(stmt string) string {
	if d.kind != "postgres" {
		return stmt
	}
	var b strings.Builder
	n := 0
	for _, r := range stmt {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// inFlight returns the messages a relay has claimed but not acknowledged
// (pending with a counted attempt) or whose last attempt failed or timed
// out (pending with an error recorded, even if the attempt was given back),
// with their attempt counts. These are the messages a fault can make a
// relay send twice.
//
// On PostgreSQL they include the pending rows that a transaction holds
// locked: a held claim's batch (--held-claims) is only locked, its attempt not
// yet counted. The sample's own FOR KEY SHARE locks, for the length of the
// statement, conflict with FOR UPDATE only.
func (d *database) inFlight(ctx context.Context, db *sql.DB) (map[string]int, error) {
	stmt := "SELECT message_id, retry_count FROM " + outboxTable +
		" WHERE status = 0 AND (retry_count > 0 OR last_error IS NOT NULL)"
	if d.kind == "postgres" {
		stmt += " OR (status = 0 AND id NOT IN (SELECT id FROM " + outboxTable + " WHERE status = 0 FOR KEY SHARE SKIP LOCKED))"
	}
	rows, err := db.QueryContext(ctx, stmt)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// pending counts the outbox rows not yet sent (status 0).
func (d *database) pending(ctx context.Context, db *sql.DB) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+outboxTable+" WHERE status = 0").Scan(&n)
	return n, err
}

// truth reads every message the database holds: business rows and outbox
// rows, joined by message id.
func (d *database) truth(ctx context.Context, db *sql.DB) ([]Row, error) {
	byID := map[string]*Row{}
	get := func(id string) *Row {
		r := byID[id]
		if r == nil {
			r = &Row{Ref: Ref{ID: id}}
			byID[id] = r
		}
		return r
	}
	rows, err := db.QueryContext(ctx, "SELECT message_id, agg, seq FROM chaos_event")
	if err != nil {
		return nil, fmt.Errorf("read business rows: %w", err)
	}
	for rows.Next() {
		var id, agg string
		var seq int64
		if err := rows.Scan(&id, &agg, &seq); err != nil {
			rows.Close()
			return nil, err
		}
		r := get(id)
		r.Business, r.Aggregate, r.Seq = true, agg, seq
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = db.QueryContext(ctx, "SELECT message_id, aggregate_id, status, retry_count FROM "+outboxTable)
	if err != nil {
		return nil, fmt.Errorf("read outbox rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, agg string
		var status, attempts int
		if err := rows.Scan(&id, &agg, &status, &attempts); err != nil {
			return nil, err
		}
		r := get(id)
		r.Outbox, r.Status, r.Attempts = true, outbox.Status(status), attempts
		if r.Aggregate == "" {
			r.Aggregate = agg
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]Row, 0, len(byID))
	for _, id := range sortedKeys(byID) {
		out = append(out, *byID[id])
	}
	return out, nil
}

// relayConns counts the connections the relays hold.
func (d *database) relayConns(ctx context.Context, db *sql.DB) (int, error) {
	q := "SELECT count(*) FROM pg_stat_activity WHERE usename = '" + relayUser + "'"
	if d.kind == "mysql" {
		q = "SELECT count(*) FROM information_schema.processlist WHERE user = '" + relayUser + "'"
	}
	var n int
	err := db.QueryRowContext(ctx, q).Scan(&n)
	return n, err
}

// killRelayConns ends every connection the relays hold, through conn. It
// returns how many it ended and, on PostgreSQL, the message ids of the rows
// that the relays held locked at that moment.
func (d *database) killRelayConns(ctx context.Context, conn *sql.Conn) (int, []string, error) {
	if d.kind == "postgres" {
		// One statement samples the rows that the relays' transactions hold
		// locked (held claims: nothing else marks them in flight) and then,
		// its condition depending on that sample, ends the relays' sessions,
		// which rolls those claims back.
		var n int
		var locked []byte
		err := conn.QueryRowContext(ctx, `WITH locked AS MATERIALIZED (
	SELECT message_id FROM `+outboxTable+` WHERE status = 0
	AND id NOT IN (SELECT id FROM `+outboxTable+` WHERE status = 0 FOR KEY SHARE SKIP LOCKED)
)
SELECT count(pg_terminate_backend(pid)), (SELECT COALESCE(json_agg(message_id), '[]') FROM locked)
FROM pg_stat_activity
WHERE usename = '`+relayUser+`' AND (SELECT count(*) FROM locked) >= 0`).Scan(&n, &locked)
		if err != nil {
			return 0, nil, err
		}
		var ids []string
		err = json.Unmarshal(locked, &ids)
		return n, ids, err
	}
	rows, err := conn.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE user = '"+relayUser+"'")
	if err != nil {
		return 0, nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	n := 0
	for _, id := range ids {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err == nil {
			n++
		}
	}
	return n, nil, nil
}
