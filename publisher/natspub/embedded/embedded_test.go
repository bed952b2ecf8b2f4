// Package embedded runs natspub's publisher suite against an in-process nats-server. It is a module of its own
// so that nats-server, which natspub itself does not need, stays out of natspub's go.mod (docs/modules.md).
package embedded_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/publisher/natspub/internal/natstest"
	"github.com/outboxkit/outbox/publisher/publishertest"
)

// TestSuiteEmbedded runs the suite once against an in-process nats-server
// with JetStream on a temporary directory: the path `outbox demo` takes.
func TestSuiteEmbedded(t *testing.T) {
	t.Parallel()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(10*time.Second), "embedded nats-server did not start")
	publishertest.Run(t, natstest.Features(t, s.ClientURL()), natstest.Harness(s.ClientURL()))
}
