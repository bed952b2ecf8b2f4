package amqppub_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/probe"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// A frozen broker holds one Ping goroutine, however many Pings time out
// waiting for it (a flood of /readyz requests): they share the one channel
// opening in progress. Not parallel: it counts every Ping goroutine of the
// process, so no other test may ping meanwhile.
func TestPingsOnAFrozenBrokerShareOneGoroutine(t *testing.T) {
	proxy := faultproxy.New(t, "127.0.0.1:"+portOf(t, testsvc.AMQPURL(t)))
	p := newPublisher(t, "amqp://guest:guest@"+proxy.Addr()+"/")
	require.NoError(t, p.Ping(t.Context()))

	proxy.Blackhole()
	const n = 100
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			require.ErrorIs(t, p.Ping(ctx), context.DeadlineExceeded)
		})
	}
	wg.Wait()
	require.Equal(t, 1, probe.Goroutines("amqppub.(*Publisher).Ping.func"), "the pings that gave up left their goroutines behind")

	proxy.Restore() // delivers what was held: the channel opening answers
	testsvc.Eventually(t, 10*time.Second, func() bool { return probe.Goroutines("amqppub.(*Publisher).Ping.func") == 0 }, "the ping round ends")
	require.NoError(t, p.Ping(t.Context()))
}
