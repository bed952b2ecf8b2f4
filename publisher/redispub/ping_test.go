package redispub_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/probe"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// A frozen server keeps no Ping goroutine past its caller's deadline, however
// many Pings time out (a flood of /readyz requests): go-redis sets the
// socket's deadline from ctx. Not parallel: it counts every Ping goroutine
// of the process.
func TestPingsOnAFrozenServerEndAtTheirDeadline(t *testing.T) {
	u, err := url.Parse(testsvc.RedisURL(t))
	require.NoError(t, err)
	proxy := faultproxy.New(t, u.Host)
	u.Host = proxy.Addr()
	p := newPublisher(t, client(t, u.String()))
	require.NoError(t, p.Ping(t.Context()))

	proxy.Blackhole()
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			require.Error(t, p.Ping(ctx))
		})
	}
	wg.Wait()
	testsvc.Eventually(t, time.Second, func() bool { return probe.Goroutines("redispub.(*Publisher).Ping.func") == 0 },
		"ping goroutines outlived their deadline while the server is frozen")

	proxy.Restore()
	testsvc.Eventually(t, 10*time.Second, func() bool { return p.Ping(t.Context()) == nil }, "pings work again")
}
