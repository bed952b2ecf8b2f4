// Command outbox runs the outbox relay and its tools: relay, migrate, status
// and demo. Run `outbox --help` for the commands and `outbox relay --help`
// for every setting with its default and OUTBOX_* environment variable.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxkit/outbox/internal/cli"
	"github.com/outboxkit/outbox/internal/liblog"
)

func main() {
	tuneGC(os.Getenv)
	// Before any connection: what client libraries print on their own goes
	// to the relay's logger (JSON by default), not raw to stderr.
	liblog.Install()
	// The first SIGINT or SIGTERM asks the command to stop gracefully; once
	// it has, signals get their default effect again, so a second Ctrl-C
	// ends a drain that takes too long.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := cli.Main(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
