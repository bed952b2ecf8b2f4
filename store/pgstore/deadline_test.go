package pgstore_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
)

// proxiedPool returns a pool on t's schema that reaches PostgreSQL through a
// fault proxy, and the proxy.
func proxiedPool(t *testing.T, dsn string) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := faultproxy.New(t, u.Host)
	u.Host = proxy.Addr()
	pool, err := pgxpool.New(context.Background(), u.String())
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Restore(); pool.Close() })
	return pool, proxy
}

// A listener whose connection is black-holed returns an error within the
// listen check and ListenTimeout, so the relay polls and starts it again,
// instead of waiting for ever for notifications that cannot come; while the
// connection answers, its checks keep it listening.
func TestListenNoticesAFrozenConnection(t *testing.T) {
	t.Parallel()
	pool, _, dsn := testsvc.PostgresSchema(t)
	newStore(t, pool, pgstore.WithNotify(true)) // migrated
	ppool, proxy := proxiedPool(t, dsn)
	const check = 200 * time.Millisecond
	s, err := pgstore.New(ppool, pgstore.WithNotify(true), pgstore.WithListenCheck(check))
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	l := startListen(ctx, s)
	l.receive(t, "when Listen started")
	select { // several checks of a live connection keep it listening
	case err := <-l.done:
		t.Fatalf("Listen returned on a live connection: %v", err)
	case <-time.After(5 * check):
	}
	writer := newStore(t, pool, pgstore.WithNotify(true))
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return outbox.NewWriter(writer).Write(t.Context(), tx, msg("a"))
	}))
	l.receive(t, "after the checks")

	proxy.Blackhole()
	frozen := time.Now()
	select {
	case err := <-l.done:
		require.ErrorContains(t, err, "pgstore: listen: the connection stopped answering")
		require.Less(t, time.Since(frozen), check+pgstore.ListenTimeout+2*time.Second)
	case <-time.After(check + pgstore.ListenTimeout + 10*time.Second):
		t.Fatal("Listen still waits on a frozen connection")
	}
}
