// Package router_test holds the router's tests that need a NATS server and a SQLite outbox. They live in the e2e
// module so that the root module, which holds the router, requires neither (docs/modules.md); the in-memory tests
// stay in publisher/router.
package router_test

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/publisher/natspub"
	"github.com/outboxkit/outbox/publisher/publishertest"
	"github.com/outboxkit/outbox/publisher/router"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

func msg(eventType, aggType string) *outbox.Message {
	return &outbox.Message{
		MessageID: outbox.NewMessageID(), AggregateType: aggType, AggregateID: "a-1", EventType: eventType,
		Payload: []byte(`{}`), Headers: map[string]string{"tenant": "acme"},
	}
}

func connect(t *testing.T, rawURL string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(rawURL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectJitter(0, 0), nats.Timeout(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// stream makes a stream of t's own capturing "<name>.>" and returns its name.
func stream(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	name := testsvc.Name(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, natspub.EnsureStream(ctx, js, name, []string{name + ".>"}, 0))
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return name
}

// receiver reads a stream back through an ordered consumer.
type receiver struct {
	it     jetstream.MessagesContext
	prefix string
}

func newReceiver(t *testing.T, js jetstream.JetStream, name string) *receiver {
	t.Helper()
	cons, err := js.OrderedConsumer(t.Context(), name, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	it, err := cons.Messages()
	require.NoError(t, err)
	t.Cleanup(it.Stop)
	return &receiver{it: it, prefix: name + "."}
}

func (r *receiver) Receive(ctx context.Context, n int) ([]publishertest.Received, error) {
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
			MessageID: h[jetstream.MsgIDHeader], Key: h[outbox.HeaderAggregateID],
			Topic: strings.TrimPrefix(m.Subject(), r.prefix), Headers: h, Payload: m.Data(),
		})
	}
	return out, nil
}

// TestSuiteThroughRouter runs the publisher suite on a Router in front of a
// real natspub publisher: routing must keep every promise of the publisher
// behind it, outages included.
func TestSuiteThroughRouter(t *testing.T) {
	t.Parallel()
	rawURL := testsvc.NATSURL(t)
	newDest := func(t *testing.T, pubURL string) publishertest.Dest {
		js := connect(t, rawURL)
		name := stream(t, js)
		p, err := natspub.New(connect(t, pubURL), natspub.WithSubjectPrefix(name+"."))
		require.NoError(t, err)
		r, err := router.New([]router.Route{
			{EventType: "NEVER_SENT", Publisher: "unused"},
			{Publisher: "nats", Default: true},
		}, map[string]outbox.Publisher{"nats": p, "unused": outboxtest.NewPublisher()})
		require.NoError(t, err)
		return publishertest.Dest{Publisher: r, Receiver: newReceiver(t, js, name), Topic: "orders"}
	}
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	publishertest.Run(t, publishertest.Features{OrderedPerKey: true, Dedup: true, Headers: true},
		publishertest.Harness{
			New: func(t *testing.T) publishertest.Dest { return newDest(t, rawURL) },
			Outage: func(t *testing.T) publishertest.OutageDest {
				proxy := faultproxy.New(t, u.Host)
				return publishertest.OutageDest{Dest: newDest(t, "nats://"+proxy.Addr()),
					Cut: proxy.Cut, Restore: proxy.Restore, Stall: proxy.Blackhole}
			},
		})
}

// TestRoutesToTwoNATSDestinations routes one batch to two publishers on two
// streams, with topic templates, and reads both streams back.
func TestRoutesToTwoNATSDestinations(t *testing.T) {
	t.Parallel()
	js := connect(t, testsvc.NATSURL(t))
	ordersStream, auditStream := stream(t, js), stream(t, js)
	orders, err := natspub.New(js, natspub.WithSubjectPrefix(ordersStream+"."))
	require.NoError(t, err)
	audit, err := natspub.New(js, natspub.WithSubjectPrefix(auditStream+"."))
	require.NoError(t, err)

	r, err := router.New([]router.Route{
		{Name: "orders", AggregateType: "order", Publisher: "orders", Topic: "{{lower .EventType}}.{{.AggregateID}}"},
		{Name: "audit", EventType: "USER_*", Publisher: "audit", Topic: "users.{{.EventType}}"},
	}, map[string]outbox.Publisher{"orders": orders, "audit": audit})
	require.NoError(t, err)

	msgs := []*outbox.Message{
		msg("ORDER_PAID", "order"),
		msg("USER_CREATED", "user"),
		msg("INVOICE_SENT", "invoice"), // no route, no default
		msg("ORDER_SHIPPED", "order"),
	}
	msgs[3].AggregateID = "a-2"
	errs := r.Publish(t.Context(), msgs)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.True(t, outbox.IsPermanent(errs[2]), "got %v", errs[2])
	require.EqualError(t, errs[2], `router: no route for event type "INVOICE_SENT" (aggregate "invoice")`)
	require.NoError(t, errs[3])

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := newReceiver(t, js, ordersStream).Receive(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, msgs[0].MessageID, got[0].MessageID)
	require.Equal(t, "order_paid.a-1", got[0].Topic)
	require.Equal(t, msgs[3].MessageID, got[1].MessageID)
	require.Equal(t, "order_shipped.a-2", got[1].Topic)

	got, err = newReceiver(t, js, auditStream).Receive(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, msgs[1].MessageID, got[0].MessageID)
	require.Equal(t, "users.USER_CREATED", got[0].Topic)

	for _, name := range []string{ordersStream, auditStream} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		want := map[string]uint64{ordersStream: 2, auditStream: 1}[name]
		require.Equal(t, want, info.State.Msgs, "stream %s holds exactly its routed messages", name)
	}
	require.Empty(t, msgs[0].Topic, "the caller's message keeps its own topic")
}

// deadRecorder is a relay hook that records dead messages with their reasons.
type deadRecorder struct {
	mu   sync.Mutex
	dead map[string]error
	sent map[string]bool
}

func (d *deadRecorder) OnMessage(ev outbox.MessageEvent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch ev.Result {
	case outbox.ResultDead:
		d.dead[ev.Message.MessageID] = ev.Err
	case outbox.ResultSent:
		d.sent[ev.Message.MessageID] = true
	}
}

// TestRelayKillsUnroutableWithReason drives a real relay (SQLite store) through
// the router to NATS: routed messages are published, the unroutable one is
// marked dead at once, on its first attempt, with the router's reason.
func TestRelayKillsUnroutableWithReason(t *testing.T) {
	t.Parallel()
	js := connect(t, testsvc.NATSURL(t))
	name := stream(t, js)
	pub, err := natspub.New(js, natspub.WithSubjectPrefix(name+"."))
	require.NoError(t, err)
	r, err := router.New([]router.Route{{EventType: "ORDER_*", Publisher: "nats", Topic: "orders.{{.EventType}}"}},
		map[string]outbox.Publisher{"nats": pub})
	require.NoError(t, err)

	db, err := sqlitestore.Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := sqlitestore.New(db)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, store.Migrate(ctx))

	msgs := []*outbox.Message{msg("ORDER_PAID", "order"), msg("USER_CREATED", "user"), msg("ORDER_SHIPPED", "order")}
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter[*sql.Tx](store).Write(ctx, tx, msgs...))
	require.NoError(t, tx.Commit())

	hook := &deadRecorder{dead: map[string]error{}, sent: map[string]bool{}}
	relay, err := outbox.NewRelay(store, r, outbox.WithHooks(hook), outbox.WithMaxAttempts(5))
	require.NoError(t, err)
	ev, err := relay.Step(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, ev.Claimed)
	require.Equal(t, 2, ev.Sent)
	require.Equal(t, 1, ev.Dead, "dead on the first attempt, not retried")

	require.Equal(t, map[string]bool{msgs[0].MessageID: true, msgs[2].MessageID: true}, hook.sent)
	require.Len(t, hook.dead, 1)
	reason := hook.dead[msgs[1].MessageID]
	require.EqualError(t, reason, `router: no route for event type "USER_CREATED" (aggregate "user")`)

	st, err := store.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Dead)
	require.Zero(t, st.Pending)

	got, err := newReceiver(t, js, name).Receive(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, "orders.ORDER_PAID", got[0].Topic)
	require.Equal(t, "orders.ORDER_SHIPPED", got[1].Topic)
}
