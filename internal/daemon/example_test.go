package daemon_test

import (
	"context"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/daemon"
)

// Embedding the relay process: load the config, build the daemon, run it
// until SIGTERM. (This is what `outbox relay` does; it needs a database and
// a broker, so it has no output to check.)
func Example() {
	cfg, err := config.Load("/etc/outbox/relay.yaml")
	if err != nil {
		log.Fatal(err)
	}
	cfg.HTTP = "127.0.0.1:9090" // /metrics, /healthz and /readyz, on this host only
	d, err := daemon.New(cfg, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := d.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
