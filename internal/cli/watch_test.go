package cli

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// status --watch on a database that stops answering (its connection
// black-holed) reports failed reads on stderr instead of going quiet, and
// prints again once the database answers.
func TestStatusWatchReportsAFrozenDatabase(t *testing.T) {
	t.Parallel()
	db := postgresAdminDB(t)
	u, err := url.Parse(db.dsn)
	require.NoError(t, err)
	proxy := faultproxy.New(t, u.Host)
	u.Host = proxy.Addr()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"outbox", "status", "--db", u.String(), "--watch", "--json", "--interval", "100ms"}, &out, &errb)
	}()
	prints := func() int { return strings.Count(out.String(), "\n") }
	testsvc.Eventually(t, 10*time.Second, func() bool { return prints() >= 2 }, "two prints")

	proxy.Blackhole()
	testsvc.Eventually(t, watchReadTimeout+5*time.Second, func() bool {
		return strings.Contains(errb.String(), "outbox: read stats of outbox_message:")
	}, "a failed read on stderr while the database does not answer")

	proxy.Restore()
	after := prints()
	testsvc.Eventually(t, 20*time.Second, func() bool { return prints() > after }, "prints again once the database answers")
	cancel()
	watchStopped(t, done, &errb)
}
