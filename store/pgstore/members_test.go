package pgstore_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/pgstore"
)

// TestRelaysJoinAndLeave runs two ordered relays, each with a Store of its
// own as two processes would have, on one table: both appear in the table
// of relays, and one that stops is gone at once (it leaves), long before
// its TTL would have run out.
func TestRelaysJoinAndLeave(t *testing.T) {
	t.Parallel()
	pool, _, _ := testsvc.PostgresSchema(t)
	table := uniqueTable(t)
	watch := newStore(t, pool, pgstore.WithTable(table))
	live := func() int {
		rs, err := watch.Relays(t.Context())
		require.NoError(t, err)
		return len(rs)
	}
	stops := make([]func(), 2)
	for i := range stops {
		r, err := outbox.NewRelay(newStore(t, pool, pgstore.WithTable(table)), outboxtest.NewPublisher(),
			outbox.WithName(fmt.Sprint("relay-", i)), outbox.WithRelayTTL(30*time.Second))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		var once sync.Once
		stops[i] = func() { once.Do(func() { cancel(); require.NoError(t, <-done) }) }
		t.Cleanup(stops[i])
	}
	testsvc.Eventually(t, 10*time.Second, func() bool { return live() == 2 }, "both relays joined")
	stops[0]()
	require.Equal(t, 1, live(), "the stopped relay left")
}

// TestRelayWithoutTableOfRelays gives an ordered relay a database user that
// may claim but not create tables, on a table whose table of relays is
// missing: Heartbeat fails with ErrNoMembership naming the statement to
// run, and the relay logs that once and delivers without a preference.
func TestRelayWithoutTableOfRelays(t *testing.T) {
	t.Parallel()
	owner, schema, _ := testsvc.PostgresSchema(t)
	table := uniqueTable(t)
	s := newStore(t, owner, pgstore.WithTable(table))
	exec(t, owner, "DROP TABLE "+s.RelaysTable())
	role := "r_" + schema
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA " + schema + " TO " + role,
	} {
		exec(t, owner, q)
	}
	cfg, err := pgxpool.ParseConfig(owner.Config().ConnString())
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		pool.Close()
		exec(t, owner, "DROP OWNED BY "+role)
		exec(t, owner, "DROP ROLE "+role)
	})
	limited, err := pgstore.New(pool, pgstore.WithTable(table))
	require.NoError(t, err)

	_, _, err = limited.Heartbeat(t.Context(), "relay-x", time.Minute)
	require.ErrorIs(t, err, outbox.ErrNoMembership)
	require.ErrorContains(t, err, "CREATE TABLE IF NOT EXISTS "+limited.RelaysTable())

	var logs syncBuffer
	pub := outboxtest.NewPublisher()
	r, err := outbox.NewRelay(limited, pub, outbox.WithRelayTTL(300*time.Millisecond), outbox.WithPollInterval(50*time.Millisecond),
		outbox.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	require.NoError(t, err)
	startRelay(t, r)
	w := outbox.NewWriter(s)
	for i := range 20 {
		require.NoError(t, pgx.BeginFunc(t.Context(), owner, func(tx pgx.Tx) error {
			return w.Write(t.Context(), tx, msg(fmt.Sprint("agg-", i%3)))
		}))
	}
	testsvc.Eventually(t, 10*time.Second, func() bool { return pub.Count() == 20 }, "delivered without a table of relays")
	<-time.After(time.Second) // an observation window: three TTLs, where heartbeats would have gone on
	require.Equal(t, 1, strings.Count(logs.String(), `msg="no table of relays`), logs.String())
	var exists bool
	require.NoError(t, owner.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", limited.RelaysTable()).Scan(&exists))
	require.False(t, exists)
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
