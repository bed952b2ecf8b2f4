package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/mysqlstore"
)

// TestRelayWithoutTableOfRelays gives an ordered relay a database user that
// may claim but not create tables, on a table whose table of relays is
// missing: Heartbeat fails with ErrNoMembership naming the statement to
// run, and the relay delivers all the same (without a preference).
func TestRelayWithoutTableOfRelays(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	_, err := db.Exec("DROP TABLE " + s.RelaysTable())
	require.NoError(t, err)
	var schema string
	require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&schema))
	user := "u_" + schema
	if len(user) > 32 { // MariaDB's limit
		user = user[:32]
	}
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%'",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + schema + ".outbox_message TO '" + user + "'@'%'",
	} {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP USER '" + user + "'@'%'") })
	cfg, err := mysql.ParseDSN(testsvc.MySQLDSN())
	require.NoError(t, err)
	cfg.User, cfg.Passwd, cfg.DBName = user, "", schema
	ldb, err := mysqlstore.Open(cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { ldb.Close() })
	limited, err := mysqlstore.New(ldb)
	require.NoError(t, err)

	_, _, err = limited.Heartbeat(t.Context(), "relay-x", time.Minute)
	require.ErrorIs(t, err, outbox.ErrNoMembership)
	require.ErrorContains(t, err, "CREATE TABLE IF NOT EXISTS")

	pub := outboxtest.NewPublisher()
	r, err := outbox.NewRelay(limited, pub, outbox.WithRelayTTL(300*time.Millisecond), outbox.WithPollInterval(50*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	w := outbox.NewWriter[*sql.Tx](s)
	for i := range 20 {
		tx, err := db.Begin()
		require.NoError(t, err)
		require.NoError(t, w.Write(t.Context(), tx, &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprint("agg-", i%3),
			EventType: "E", Payload: []byte(`{}`)}))
		require.NoError(t, tx.Commit())
	}
	testsvc.Eventually(t, 10*time.Second, func() bool { return pub.Count() == 20 }, "delivered without a table of relays")
}
