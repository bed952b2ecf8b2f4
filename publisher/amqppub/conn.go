package amqppub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/internal/redact"
)

// DialFunc opens a new connection to RabbitMQ. It must return by the time ctx
// ends. The Publisher calls it from its reconnect loop and owns (and closes)
// every connection it returns.
type DialFunc func(ctx context.Context) (*amqp.Connection, error)

// DefaultHeartbeat is the AMQP heartbeat interval [DialURL] asks for: a
// connection whose peer went silent is declared dead after about three of
// them.
const DefaultHeartbeat = 10 * time.Second

// DialURL returns a DialFunc for an amqp:// or amqps:// URL (see
// amqp091-go's ParseURI for its parameters: vhost in the path, heartbeat,
// connection_timeout, TLS files for amqps). cfg is the base configuration;
// its Dial field is replaced by one that honours the context (the TCP dial
// and the TLS and AMQP handshakes all end with it), and a zero Heartbeat
// becomes DefaultHeartbeat. The URL is checked at once; errors never
// contain the password.
func DialURL(rawURL string, cfg amqp.Config) (DialFunc, error) {
	uri, err := amqp.ParseURI(rawURL)
	if err != nil {
		// The parser quotes the URL: keep its user information out, by its
		// structure, whatever the password's length.
		var red redact.Redactor
		red.AddURL(rawURL, false)
		return nil, fmt.Errorf("amqppub: parse URL: %s", red.String(err.Error()))
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Properties == nil {
		cfg.Properties = amqp.NewConnectionProperties()
		cfg.Properties.SetClientConnectionName("outbox-relay")
	}
	redacted := uri.Scheme + "://" + net.JoinHostPort(uri.Host, fmt.Sprint(uri.Port)) + "/" + uri.Vhost
	return func(ctx context.Context) (*amqp.Connection, error) {
		c := cfg
		c.Dial = func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The handshakes that follow have no context: bound them by its
			// deadline (amqp091 clears it once the connection is open).
			deadline, ok := ctx.Deadline()
			if !ok {
				deadline = time.Now().Add(30 * time.Second)
			}
			if err := conn.SetDeadline(deadline); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		}
		conn, err := amqp.DialConfig(rawURL, c)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", redacted, err)
		}
		return conn, nil
	}, nil
}

// connState is the reconnect loop's view of the connection, replaced as a
// whole on every change and guarded by Publisher.mu.
type connState struct {
	conn    *amqp.Connection // nil while down
	gen     uint64           // increments with every new connection
	err     error            // why conn is nil
	dialing bool             // an attempt is under way
	closed  bool             // Close was called
	changed chan struct{}    // closed when the state is replaced
}

// ErrClosed is returned (as [outbox.Unavailable]) by a Publisher after Close.
var ErrClosed = errors.New("amqppub: publisher closed")

// run is the reconnect loop: it dials, watches the connection, and dials
// again when it is lost, backing off after failed attempts. It returns when
// ctx (cancelled by Close) ends.
func (p *Publisher) run(ctx context.Context) {
	backoff := p.cfg.minBackoff
	for {
		p.update(func(s *connState) { s.dialing = true })
		dctx, cancel := context.WithTimeout(ctx, p.cfg.dialTimeout)
		conn, err := p.dialSetup(dctx)
		cancel()
		if ctx.Err() != nil {
			if conn != nil {
				_ = conn.Close()
			}
			return
		}
		if err != nil {
			p.update(func(s *connState) { s.dialing, s.err = false, err })
			p.log.LogAttrs(ctx, slog.LevelWarn, "rabbitmq connection failed",
				slog.String("error", err.Error()), slog.Duration("delay", backoff))
			// Never sooner than minBackoff; after that a kick (a Publish or
			// Ping waiting for a connection) cuts the wait short.
			if !sleep(ctx, p.cfg.minBackoff) {
				return
			}
			t := time.NewTimer(backoff - p.cfg.minBackoff)
			select {
			case <-t.C:
			case <-p.kick:
			case <-ctx.Done():
				t.Stop()
				return
			}
			t.Stop()
			backoff = min(2*backoff, p.cfg.maxBackoff)
			continue
		}
		backoff = p.cfg.minBackoff
		lost := conn.NotifyClose(make(chan *amqp.Error, 1))
		p.update(func(s *connState) { s.conn, s.gen, s.err, s.dialing = conn, s.gen+1, nil, false })
		p.log.LogAttrs(ctx, slog.LevelInfo, "rabbitmq connected")
		select {
		case amqpErr := <-lost:
			err := errors.New("connection closed")
			if amqpErr != nil {
				err = fmt.Errorf("connection lost: %w", amqpErr)
			}
			p.update(func(s *connState) { s.conn, s.err = nil, err })
			p.log.LogAttrs(ctx, slog.LevelWarn, "rabbitmq connection lost", slog.String("error", err.Error()))
		case <-ctx.Done():
			p.update(func(s *connState) { s.conn, s.err = nil, ErrClosed })
			_ = conn.CloseDeadline(time.Now().Add(time.Second))
			return
		}
	}
}

// dialSetup dials and runs the setup function on a channel of the new connection.
func (p *Publisher) dialSetup(ctx context.Context) (*amqp.Connection, error) {
	conn, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	if p.cfg.setup == nil {
		return conn, nil
	}
	err = runBounded(ctx, func() error {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		return p.cfg.setup(ch)
	}, func() { _ = conn.CloseDeadline(time.Now()) })
	if err != nil {
		_ = conn.CloseDeadline(time.Now().Add(time.Second))
		return nil, fmt.Errorf("setup: %w", err)
	}
	return conn, nil
}

// update replaces the connection state, waking everyone waiting on it.
func (p *Publisher) update(change func(*connState)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := *p.state
	next.changed = make(chan struct{})
	change(&next)
	close(p.state.changed)
	p.state = &next
}

func (p *Publisher) snapshot() *connState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// connection returns the live connection, waiting (within ctx) for an
// attempt under way or for one it asks the loop to make at once. While the
// broker cannot be reached it returns an [outbox.Unavailable] error as soon
// as one attempt has failed.
func (p *Publisher) connection(ctx context.Context) (*amqp.Connection, uint64, error) {
	sawAttempt := false
	for {
		s := p.snapshot()
		switch {
		case s.closed:
			return nil, 0, ErrClosed
		case s.conn != nil && !s.conn.IsClosed():
			return s.conn, s.gen, nil
		case s.dialing:
			sawAttempt = true
		case sawAttempt:
			return nil, 0, fmt.Errorf("no connection to RabbitMQ: %w", s.err)
		default:
			select {
			case p.kick <- struct{}{}:
			default:
			}
		}
		select {
		case <-s.changed:
		case <-ctx.Done():
			err := fmt.Errorf("no connection to RabbitMQ: %w", ctx.Err())
			if s.err != nil {
				err = fmt.Errorf("%w (last error: %v)", err, s.err)
			}
			return nil, 0, err
		}
	}
}

// runBounded runs fn, an amqp091 call that has no context, and returns its
// error, or ctx's when ctx ends first; then abort (which must make fn return
// soon, e.g. by closing its connection) runs and fn is left to finish.
func runBounded(ctx context.Context, fn func() error, abort func()) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		abort()
		<-done
		return ctx.Err()
	}
}

// sleep waits d or until ctx ends, and reports whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
