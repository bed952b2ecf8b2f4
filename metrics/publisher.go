package metrics

import (
	"context"
	"time"

	"github.com/outboxkit/outbox"
)

// WrapPublisher returns a Publisher that times every Publish call of pub into
// outbox_relay_publish_duration_seconds: the broker's side of a batch, which,
// set against outbox_relay_batch_duration_seconds, tells a slow broker from a
// slow database. The wrapper implements outbox.Pinger exactly when pub does,
// so the relay's probing and /readyz behave as with pub itself; Unwrap
// returns pub. It is safe for concurrent use when pub is.
func (m *Metrics) WrapPublisher(pub outbox.Publisher) outbox.Publisher {
	t := &timedPublisher{pub: pub, m: m}
	if p, ok := pub.(outbox.Pinger); ok {
		return &timedPingPublisher{timedPublisher: t, ping: p}
	}
	return t
}

type timedPublisher struct {
	pub outbox.Publisher
	m   *Metrics
}

func (p *timedPublisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	start := time.Now()
	errs := p.pub.Publish(ctx, msgs)
	p.m.publishDuration.Observe(time.Since(start).Seconds())
	return errs
}

// Unwrap returns the wrapped publisher.
func (p *timedPublisher) Unwrap() outbox.Publisher { return p.pub }

type timedPingPublisher struct {
	*timedPublisher
	ping outbox.Pinger
}

func (p *timedPingPublisher) Ping(ctx context.Context) error { return p.ping.Ping(ctx) }
