// Package natstest holds the NATS side of natspub's test harness: connections, streams, a receiver and the
// publishertest.Harness. It lives outside the _test files so that the embedded-server suite
// (publisher/natspub/embedded, a module of its own because nats-server is heavy) runs the same harness.
package natstest

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/natspub"
	"github.com/outboxkit/outbox/publisher/publishertest"
)

// Connect opens a connection that comes back quickly after an outage, and
// closes it when t ends.
func Connect(t *testing.T, rawURL string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts = append([]nats.Option{
		nats.Name(t.Name()),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond),
		nats.ReconnectJitter(0, 0),
		nats.Timeout(2 * time.Second),
	}, opts...)
	nc, err := nats.Connect(rawURL, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	require.NoError(t, err)
	return nc, js
}

// Stream creates a stream of t's own capturing "<name>.>" through EnsureStream
// and deletes it when t ends. It returns the stream's name, also the subject prefix.
func Stream(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	name := testsvc.Name(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, natspub.EnsureStream(ctx, js, name, []string{name + ".>"}, 0))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
	})
	return name
}

// Receiver reads a stream back through an ordered consumer on its own connection.
type Receiver struct {
	it     jetstream.MessagesContext
	prefix string
}

func NewReceiver(t *testing.T, js jetstream.JetStream, name, prefix string) *Receiver {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	it, err := cons.Messages()
	require.NoError(t, err)
	t.Cleanup(it.Stop)
	return &Receiver{it: it, prefix: prefix}
}

func (r *Receiver) Receive(ctx context.Context, n int) ([]publishertest.Received, error) {
	var out []publishertest.Received
	for len(out) < n {
		m, err := r.it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return out, err
		}
		h := make(map[string]string, len(m.Headers()))
		for k, v := range m.Headers() {
			h[k] = v[0]
		}
		out = append(out, publishertest.Received{
			MessageID:   m.Headers().Get(jetstream.MsgIDHeader),
			Key:         h[outbox.HeaderAggregateID],
			Topic:       strings.TrimPrefix(m.Subject(), r.prefix),
			Headers:     h,
			Payload:     m.Data(),
			ContentType: m.Headers().Get("Content-Type"),
		})
	}
	return out, nil
}

// Harness runs the suite against the NATS server at rawURL: a stream per
// subtest, the receiver on a direct connection, and the outage publisher
// behind a faultproxy.
func Harness(rawURL string) publishertest.Harness {
	newDest := func(t *testing.T, pubURL string) publishertest.Dest {
		_, js := Connect(t, rawURL)
		name := Stream(t, js)
		_, pjs := Connect(t, pubURL)
		p, err := natspub.New(pjs, natspub.WithSubjectPrefix(name+"."))
		require.NoError(t, err)
		return publishertest.Dest{Publisher: p, Receiver: NewReceiver(t, js, name, name+"."), Topic: "orders"}
	}
	return publishertest.Harness{
		New: func(t *testing.T) publishertest.Dest { return newDest(t, rawURL) },
		Outage: func(t *testing.T) publishertest.OutageDest {
			u, err := url.Parse(rawURL)
			require.NoError(t, err)
			proxy := faultproxy.New(t, u.Host)
			return publishertest.OutageDest{
				Dest:    newDest(t, "nats://"+proxy.Addr()),
				Cut:     proxy.Cut,
				Restore: proxy.Restore,
				Stall:   proxy.Blackhole,
			}
		},
		Down: func(t *testing.T) outbox.Publisher {
			_, js := Connect(t, "nats://"+ClosedAddr(t), nats.RetryOnFailedConnect(true))
			p, err := natspub.New(js)
			require.NoError(t, err)
			return p
		},
	}
}

// Features reads the server's max payload: the limit covers headers and data,
// so the largest payload that fits leaves room for the standard headers.
func Features(t *testing.T, rawURL string) publishertest.Features {
	nc, _ := Connect(t, rawURL)
	limit := int(nc.MaxPayload())
	return publishertest.Features{
		OrderedPerKey:   true,
		Dedup:           true,
		Headers:         true,
		ContentType:     true,
		MaxPayload:      limit - 2048,
		TooLargePayload: limit + 1,
	}
}

// ClosedAddr returns a local address nothing listens on.
func ClosedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
