package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
)

// stallingStore is a real store whose claims or acknowledgements, while
// stalled, wait for their ctx as a call to a database that stopped answering
// does.
type stallingStore struct {
	outbox.Store
	claims, acks atomic.Bool
	// deaf, when not nil, makes stalled calls ignore their ctx and wait for
	// deaf to be closed instead, as database/sql's Commit, which takes no
	// context, does on a connection that gets no answer.
	deaf chan struct{}
}

func (s *stallingStore) stall(ctx context.Context) error {
	if s.deaf != nil {
		<-s.deaf
		return errors.New("connection reset")
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *stallingStore) Claim(ctx context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	if s.claims.Load() {
		return nil, s.stall(ctx)
	}
	return s.Store.Claim(ctx, p)
}

func (s *stallingStore) Ack(ctx context.Context, p outbox.AckParams) (int, error) {
	if s.acks.Load() {
		return 0, s.stall(ctx)
	}
	return s.Store.Ack(ctx, p)
}

// logBuffer is a JSON log that tests read while the relay writes it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// A claim that the database never answers times out after the store
// timeout with a warning, and is tried again; once the database answers,
// the relay delivers what waited.
func TestRelayClaimTimesOutWithWarning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st := &stallingStore{Store: b.store}
	st.claims.Store(true)
	logs := &logBuffer{}
	pub := outboxtest.NewPublisher()
	r := fastRelay(t, st, pub, outbox.WithStoreTimeout(200*time.Millisecond),
		outbox.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
	b.write(t, many(5)...)
	run(t, r)
	testsvc.Eventually(t, 2*time.Second, func() bool {
		return strings.Contains(logs.String(), `"level":"WARN","msg":"database call timed out, will retry"`)
	}, "a warning once the claim ran out of the store timeout")
	require.Contains(t, logs.String(), "outbox: database call timed out after 200ms")
	require.Zero(t, pub.Count())
	st.claims.Store(false)
	testsvc.Eventually(t, 10*time.Second, func() bool { return b.count(t, "status = 1") == 5 }, "delivered once the database answers")
}

// A claim or acknowledgement that ignores its deadline does not hold the
// relay: a second after the store timeout the relay goes on without it,
// warns, and a stop returns in time.
func TestRelayGoesOnWithoutADeafStoreCall(t *testing.T) {
	t.Parallel()
	const storeTimeout = 200 * time.Millisecond
	for _, call := range []string{"Claim", "Ack"} {
		t.Run(call, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			st := &stallingStore{Store: b.store, deaf: make(chan struct{})}
			t.Cleanup(func() { close(st.deaf) })
			if call == "Claim" {
				st.claims.Store(true)
			} else {
				st.acks.Store(true)
			}
			logs := &logBuffer{}
			r := fastRelay(t, st, outboxtest.NewPublisher(), outbox.WithStoreTimeout(storeTimeout),
				outbox.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
			b.write(t, many(3)...)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			testsvc.Eventually(t, 5*time.Second, func() bool {
				return strings.Contains(logs.String(), "the database call ignored its deadline")
			}, "the relay went on without the call, and said so")
			stopped := time.Now()
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
				// A claim started just before the stop may take its store
				// timeout and the second the relay waits for a deaf call.
				require.Less(t, time.Since(stopped), storeTimeout+time.Second+outbox.DefaultPublishTimeout+outbox.StopGrace)
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return after its stop: it waits for a call that ignores its deadline")
			}
		})
	}
}

// A stop finishes within the publish timeout plus StopGrace even when the
// acknowledgement of the batch in flight never gets an answer; the rows
// stay claimed and go out again after their lease.
func TestRelayStopIsBoundedWhileTheDatabaseHangs(t *testing.T) {
	t.Parallel()
	const publishTimeout = 200 * time.Millisecond
	tests := []struct {
		name         string
		storeTimeout time.Duration
	}{
		{"AckLongerThanTheStop", time.Minute},
		{"DefaultStoreTimeout", outbox.DefaultStoreTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			st := &stallingStore{Store: b.store}
			st.acks.Store(true)
			pub := outboxtest.NewPublisher()
			published := make(chan struct{})
			var once sync.Once
			pub.OnDeliver(func(*outbox.Message) { once.Do(func() { close(published) }) })
			logs := &logBuffer{}
			r := fastRelay(t, st, pub, outbox.WithPublishTimeout(publishTimeout), outbox.WithLease(time.Second),
				outbox.WithStoreTimeout(tc.storeTimeout), outbox.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
			b.write(t, many(3)...)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			<-published
			stopped := time.Now()
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
				require.Less(t, time.Since(stopped), publishTimeout+outbox.StopGrace+500*time.Millisecond)
			case <-time.After(publishTimeout + outbox.StopGrace + 10*time.Second):
				t.Fatal("Run did not return after its stop")
			}
			require.Zero(t, b.count(t, "status = 1"), "the acks never got through")
			require.Contains(t, logs.String(), `"msg":"relay cycle failed while stopping"`)
			require.Contains(t, logs.String(), "outbox: relay stopping: the batch in flight had 2.2s to finish: ack 3 messages",
				"the log says why the ack was cut short")

			st.acks.Store(false)
			pub.Reset()
			run(t, r)
			testsvc.Eventually(t, 10*time.Second, func() bool { return b.count(t, "status = 1") == 3 },
				"published again after the lease, and acknowledged")
		})
	}
}

// hangingBroker is a broker that accepted the connection and then says
// nothing: publishes and pings wait for their ctx.
type hangingBroker struct{ publishing chan struct{} }

func (h *hangingBroker) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	select {
	case h.publishing <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return outbox.ErrorsFor(len(msgs), ctx.Err())
}

func (h *hangingBroker) Ping(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// A stop while the broker hangs does not spend the stop's grace asking the
// broker whether it is down: the batch that timed out is made due again,
// its attempt given back, within the publish timeout plus StopGrace.
func TestRelayStopSettlesWhileTheBrokerHangs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := &hangingBroker{publishing: make(chan struct{}, 1)}
	logs := &logBuffer{}
	r := fastRelay(t, b.store, pub, outbox.WithPublishTimeout(outbox.DefaultPublishTimeout),
		outbox.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
	b.write(t, many(3)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-pub.publishing
	stopped := time.Now()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
		require.Less(t, time.Since(stopped), outbox.DefaultPublishTimeout+outbox.StopGrace)
	case <-time.After(outbox.DefaultPublishTimeout + outbox.StopGrace + 10*time.Second):
		t.Fatal("Run did not return after its stop")
	}
	require.NotContains(t, logs.String(), "relay cycle failed while stopping")
	require.Equal(t, 3, b.count(t, "status = 0 AND retry_count = 0"), "due again, the attempt given back")
}
