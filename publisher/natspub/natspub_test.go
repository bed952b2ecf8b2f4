package natspub_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/natspub"
	"github.com/outboxkit/outbox/publisher/natspub/internal/natstest"
	"github.com/outboxkit/outbox/publisher/publishertest"
)

// The harness lives in internal/natstest, shared with the embedded-server suite in ./embedded.
var (
	connect     = natstest.Connect
	stream      = natstest.Stream
	newReceiver = natstest.NewReceiver
	harness     = natstest.Harness
	features    = natstest.Features
	closedAddr  = natstest.ClosedAddr
)

func TestSuite(t *testing.T) {
	t.Parallel()
	rawURL := testsvc.NATSURL(t)
	publishertest.Run(t, features(t, rawURL), harness(rawURL))
}

func TestNew(t *testing.T) {
	t.Parallel()
	_, js := connect(t, testsvc.NATSURL(t))
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"outbox.", true},
		{"outbox.orders", true},
		{"out box.", false},
		{"outbox..", false},
		{".outbox", false},
		{"outbox.*.", false},
		{">", false},
	} {
		p, err := natspub.New(js, natspub.WithSubjectPrefix(tc.prefix))
		if tc.ok {
			require.NoError(t, err, "prefix %q", tc.prefix)
			require.NotNil(t, p)
			continue
		}
		require.ErrorContains(t, err, "WithSubjectPrefix", "prefix %q", tc.prefix)
	}
	require.Panics(t, func() { _, _ = natspub.New(nil) })
}

func TestSubject(t *testing.T) {
	t.Parallel()
	_, js := connect(t, testsvc.NATSURL(t))
	p, err := natspub.New(js, natspub.WithSubjectPrefix("outbox."))
	require.NoError(t, err)
	require.Equal(t, "outbox.ORDER_PAID", p.Subject(&outbox.Message{EventType: "ORDER_PAID"}))
	require.Equal(t, "outbox.orders.eu", p.Subject(&outbox.Message{EventType: "ORDER_PAID", Topic: "orders.eu"}))
}

// TestHeadersAndSubjects checks each message of one batch for its exact
// headers (StandardHeaders plus Nats-Msg-Id, however the caller's own
// headers collide with them) and its own subject, and that a refused subject
// fails only the messages that have it.
func TestHeadersAndSubjects(t *testing.T) {
	t.Parallel()
	_, js := connect(t, testsvc.NATSURL(t))
	name := stream(t, js)
	p, err := natspub.New(js, natspub.WithSubjectPrefix(name+"."))
	require.NoError(t, err)
	rcv := newReceiver(t, js, name, name+".")

	msg := func(topic string, h map[string]string) *outbox.Message {
		return &outbox.Message{MessageID: outbox.NewMessageID(), AggregateType: "order", AggregateID: "1",
			EventType: "ORDER_PAID", Topic: topic, Headers: h, Payload: []byte(`{}`)}
	}
	spoofed := msg("orders", map[string]string{"x-a": "1", outbox.HeaderMessageID: "spoofed",
		outbox.HeaderPartitionKey: "mine", jetstream.MsgIDHeader: "spoofed"})
	keyed := msg("orders", map[string]string{outbox.HeaderPartitionKey: "mine"})
	keyed.PartitionKey = "tenant-1"
	noID := msg("refunds", map[string]string{jetstream.MsgIDHeader: outbox.NewMessageID()})
	noID.MessageID = ""
	msgs := []*outbox.Message{spoofed, msg("orders.*", nil), msg("orders.*", nil), keyed, msg("", nil), noID, msg("orders", nil)}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	errs := p.Publish(ctx, msgs)
	var sent []*outbox.Message
	for i, m := range msgs {
		if m.Destination() == "orders.*" {
			require.True(t, outbox.IsPermanent(errs[i]), "message %d: want permanent, got %v", i, errs[i])
			continue
		}
		require.NoError(t, errs[i], "message %d", i)
		sent = append(sent, m)
	}
	got, err := rcv.Receive(ctx, len(sent))
	require.NoError(t, err)
	for i, m := range sent {
		want := m.StandardHeaders()
		if m.MessageID != "" {
			want[jetstream.MsgIDHeader] = m.MessageID
		}
		want[natspub.HeaderContentType] = m.MediaType()
		require.Equal(t, want, got[i].Headers, "message %d", i)
		require.Equal(t, m.Destination(), got[i].Topic, "message %d", i)
	}
}

// TestRefusedMessagesArePermanent covers what the server or the client refuses
// for the message itself: each fails alone, permanently, and its batch-mates
// are stored.
func TestRefusedMessagesArePermanent(t *testing.T) {
	t.Parallel()
	rawURL := testsvc.NATSURL(t)
	_, js := connect(t, rawURL)
	name := testsvc.Name(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	testsvc.CreateStream(t, js, jetstream.StreamConfig{
		Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage, MaxMsgSize: 1024,
	})
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	p, err := natspub.New(js, natspub.WithSubjectPrefix(name+"."))
	require.NoError(t, err)

	ok := func() *outbox.Message {
		return &outbox.Message{MessageID: outbox.NewMessageID(), AggregateType: "order", AggregateID: "1",
			EventType: "ORDER_PAID", Topic: "orders", Payload: []byte(`{}`)}
	}
	for _, tc := range []struct {
		name string
		bad  func(m *outbox.Message)
		want string
	}{
		{"OverStreamMaxMsgSize", func(m *outbox.Message) { m.Payload = []byte(`"` + strings.Repeat("x", 2048) + `"`) }, "maximum"},
		{"WildcardSubject", func(m *outbox.Message) { m.Topic = "orders.*" }, "wildcard"},
		{"EmptyToken", func(m *outbox.Message) { m.Topic = "orders..eu" }, "empty token"},
		{"WhitespaceSubject", func(m *outbox.Message) { m.Topic = "orders eu" }, "whitespace"},
		{"BadHeaderName", func(m *outbox.Message) { m.Headers = map[string]string{"a:b": "x"} }, "header name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := []*outbox.Message{ok(), ok(), ok()}
			tc.bad(msgs[1])
			errs := p.Publish(ctx, msgs)
			require.Len(t, errs, 3)
			require.NoError(t, errs[0])
			require.NoError(t, errs[2])
			require.True(t, outbox.IsPermanent(errs[1]), "want permanent, got %v", errs[1])
			require.ErrorContains(t, errs[1], tc.want)
		})
	}
}

func TestNoStreamIsUnavailable(t *testing.T) {
	t.Parallel()
	_, js := connect(t, testsvc.NATSURL(t))
	p, err := natspub.New(js, natspub.WithSubjectPrefix(testsvc.Name(t)+".nostream."))
	require.NoError(t, err)
	msgs := []*outbox.Message{
		{MessageID: outbox.NewMessageID(), AggregateType: "a", AggregateID: "1", EventType: "E", Payload: []byte(`1`)},
		{MessageID: outbox.NewMessageID(), AggregateType: "a", AggregateID: "2", EventType: "E", Payload: []byte(`2`)},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	errs := p.Publish(ctx, msgs)
	require.Less(t, time.Since(start), 4*time.Second, "no responders should be reported, not waited out")
	for _, err := range errs {
		require.True(t, outbox.IsUnavailable(err), "want unavailable, got %v", err)
		require.True(t, outbox.IsUnroutable(err), "no stream for the subject: unroutable, got %v", err)
		require.False(t, outbox.IsPermanent(err), "retried, got %v", err)
		require.True(t, errors.Is(err, jetstream.ErrNoStreamResponse), "got %v", err)
	}
}

func TestClosedConnection(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testsvc.NATSURL(t))
	p, err := natspub.New(js)
	require.NoError(t, err)
	require.NoError(t, p.Ping(t.Context()))
	nc.Close()

	errs := p.Publish(t.Context(), []*outbox.Message{{MessageID: "x", AggregateType: "a", AggregateID: "1",
		EventType: "E", Payload: []byte(`1`)}})
	require.Len(t, errs, 1)
	require.True(t, outbox.IsUnavailable(errs[0]), "got %v", errs[0])
	err = p.Ping(t.Context())
	require.True(t, outbox.IsUnavailable(err), "got %v", err)
}

func TestPingStreams(t *testing.T) {
	t.Parallel()
	_, js := connect(t, testsvc.NATSURL(t))
	name := stream(t, js)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()

	ok, err := natspub.New(js, natspub.WithPingStreams(name))
	require.NoError(t, err)
	require.NoError(t, ok.Ping(ctx))

	missing, err := natspub.New(js, natspub.WithPingStreams(name, name+"_GONE"))
	require.NoError(t, err)
	err = missing.Ping(ctx)
	require.Error(t, err)
	require.True(t, outbox.IsUnavailable(err), "a missing stream means the destination is down: %v", err)
	require.Contains(t, err.Error(), name+"_GONE")
}
