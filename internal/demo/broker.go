package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/internal/embeddednats"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/redact"
)

// broker is the NATS side of a run: the server (embedded or given), a direct
// connection for setup and for the shipping service, and the fault proxy
// through which every payment path and the relay publish.
type broker struct {
	desc   string // for the summary, without credentials
	log    *slog.Logger
	srv    *server.Server // the embedded server, nil for a given one
	direct *nats.Conn
	js     jetstream.JetStream // on direct
	proxy  *faultproxy.Proxy
	url    *url.URL // the server's URL with the proxy's address as host
	// conns are the connections made through the proxy, closed by close.
	conns []*nats.Conn
}

// startBroker starts an embedded JetStream server in dir when raw is empty,
// else uses the server at raw, and puts a fault proxy in front of it.
func startBroker(raw, dir string, log *slog.Logger) (_ *broker, err error) {
	b := &broker{log: log}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if raw == "" {
		if b.srv, err = embeddednats.Run("outbox-demo", filepath.Join(dir, "nats")); err != nil {
			return nil, err
		}
		raw = b.srv.ClientURL()
		b.desc = "embedded NATS JetStream " + server.VERSION
	} else {
		b.desc = "NATS JetStream at " + redact.URLs(raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	b.direct, err = nats.Connect(raw, nats.Name("outbox-demo shipping"), nats.Timeout(5*time.Second),
		nats.ErrorHandler(b.asyncError))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redact.URLs(raw), err)
	}
	if b.js, err = jetstream.New(b.direct); err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.js.AccountInfo(ctx); err != nil {
		return nil, fmt.Errorf("%s: JetStream not available: %w", redact.URLs(raw), err)
	}
	if b.proxy, err = faultproxy.Start(u.Host); err != nil {
		return nil, fmt.Errorf("fault proxy: %w", err)
	}
	proxied := *u
	proxied.Host = b.proxy.Addr()
	b.url = &proxied
	return b, nil
}

// dial connects a service to the broker through the fault proxy. Every
// service gets the same options, so the outage meets them the same way:
// quick reconnects, a stale connection noticed within about 2 s, and no
// client-side buffer while reconnecting (a publish during a reconnect fails
// at once rather than waiting in process memory).
func (b *broker) dial(name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(b.url.String(),
		nats.Name("outbox-demo "+name),
		nats.Timeout(PublishTimeout),
		nats.PingInterval(time.Second),
		nats.MaxPingsOutstanding(2),
		nats.ReconnectWait(100*time.Millisecond),
		nats.ReconnectJitter(50*time.Millisecond, 50*time.Millisecond),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1),
		nats.ErrorHandler(b.asyncError),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s through the proxy: %w", name, err)
	}
	b.conns = append(b.conns, nc)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream for %s: %w", name, err)
	}
	return nc, js, nil
}

// asyncError logs what the NATS client reports outside of a call (the
// client's default prints to stderr, which would tear the progress bar).
func (b *broker) asyncError(nc *nats.Conn, sub *nats.Subscription, err error) {
	b.log.Warn("nats connection error", "connection", nc.Opts.Name, "error", err.Error())
}

// close closes the connections, the proxy and the embedded server.
func (b *broker) close() {
	for _, nc := range b.conns {
		nc.Close()
	}
	if b.direct != nil {
		b.direct.Close()
	}
	if b.proxy != nil {
		_ = b.proxy.Close()
	}
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
}
