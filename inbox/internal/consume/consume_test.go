package consume

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/testsvc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is a Delivery that records what the engine did with it.
type fake struct {
	msg      *outbox.Message
	prior    int
	canDead  bool
	deadErrs int // the first deadErrs dead-letter calls fail

	mu      sync.Mutex
	acks    int
	aborts  int
	dead    []Dead
	extends int
	end     chan struct{} // closed at the first Ack or Abandon
}

func newFake(id string) *fake {
	return &fake{msg: &outbox.Message{MessageID: id, AggregateID: "a", Payload: []byte(`{}`)}, end: make(chan struct{})}
}

func (f *fake) Message() *outbox.Message { return f.msg }
func (f *fake) Key() string              { return f.msg.AggregateID }
func (f *fake) Prior() int               { return f.prior }

func (f *fake) Ack(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks++
	f.closeEnd()
	return nil
}

func (f *fake) Abandon() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.aborts++
	f.closeEnd()
}

func (f *fake) closeEnd() {
	if f.acks+f.aborts == 1 {
		close(f.end)
	}
}

func (f *fake) DeadLetter(_ context.Context, d Dead) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.canDead {
		return ErrNoDeadLetter
	}
	if f.deadErrs > 0 {
		f.deadErrs--
		return errors.New("dead-letter destination down")
	}
	f.dead = append(f.dead, d)
	return nil
}

func (f *fake) Extend() {
	f.mu.Lock()
	f.extends++
	f.mu.Unlock()
}

func (f *fake) wait(t *testing.T) {
	t.Helper()
	select {
	case <-f.end:
	case <-time.After(20 * time.Second):
		t.Fatal("the delivery never ended")
	}
}

// counts returns acks, aborts and dead letters, checking the engine ended the
// delivery exactly once.
func (f *fake) counts(t *testing.T) (acks, aborts int, dead []Dead) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, 1, f.acks+f.aborts, "Ack and Abandon calls")
	return f.acks, f.aborts, f.dead
}

type events struct {
	mu  sync.Mutex
	evs []inbox.DeliveryEvent
}

func (e *events) OnDelivery(ev inbox.DeliveryEvent) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) all() []inbox.DeliveryEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]inbox.DeliveryEvent(nil), e.evs...)
}

// setup returns a migrated SQLite inbox (unless migrate is false) and an
// engine on it with small backoffs.
func setup(t *testing.T, h inbox.Handler, migrate bool, mod func(*Config)) (*Engine, *inbox.Inbox, *events) {
	db, err := sql.Open("sqlite", "file:"+testsvc.SQLitePath(t)+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	in, err := inbox.New(db, inbox.SQLite, inbox.WithConsumer("c"))
	require.NoError(t, err)
	if migrate {
		require.NoError(t, in.Migrate(context.Background()))
	}
	ev := &events{}
	cfg := DefaultConfig()
	cfg.RetryBase, cfg.RetryCap, cfg.MaxAttempts = time.Millisecond, 5*time.Millisecond, 3
	cfg.Hooks = []inbox.HookDelivery{ev}
	if mod != nil {
		mod(&cfg)
	}
	require.NoError(t, cfg.Validate())
	return New(cfg, in, h, "test"), in, ev
}

// run submits the deliveries to a started pool and waits for all of them.
func run(t *testing.T, e *Engine, ds ...*fake) {
	ctx := context.Background()
	p := e.Start(ctx)
	for _, d := range ds {
		require.NoError(t, p.Submit(ctx, d))
	}
	for _, d := range ds {
		d.wait(t)
	}
	p.Close()
}

func TestEngine(t *testing.T) {
	t.Parallel()
	ok := func(context.Context, *sql.Tx, *outbox.Message) error { return nil }

	t.Run("ProcessesThenAbsorbsDuplicates", func(t *testing.T) {
		t.Parallel()
		e, _, ev := setup(t, ok, true, nil)
		a, b := newFake("m"), newFake("m")
		run(t, e, a, b)
		for _, f := range []*fake{a, b} {
			acks, _, dead := f.counts(t)
			require.Equal(t, 1, acks)
			require.Empty(t, dead)
		}
		evs := ev.all()
		require.Len(t, evs, 2)
		require.Equal(t, inbox.Processed, evs[0].Outcome)
		require.Equal(t, 1, evs[0].Attempts)
		require.Equal(t, inbox.Duplicate, evs[1].Outcome)
	})

	t.Run("DeadLettersAfterMaxAttemptsCountingPriorDeliveries", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int64
		e, _, ev := setup(t, func(context.Context, *sql.Tx, *outbox.Message) error {
			runs.Add(1)
			return errors.New("boom")
		}, true, nil)
		f := newFake("m")
		f.canDead, f.prior, f.deadErrs = true, 1, 2 // the destination fails twice: retried, not re-run
		run(t, e, f)
		acks, _, dead := f.counts(t)
		require.Equal(t, 1, acks)
		require.Len(t, dead, 1)
		require.Equal(t, 3, dead[0].Attempts)
		require.Equal(t, "c", dead[0].Consumer)
		require.ErrorContains(t, dead[0].Err, "boom")
		require.Equal(t, int64(2), runs.Load(), "one prior delivery, so two runs are left")
		evs := ev.all()
		require.Len(t, evs, 1)
		require.True(t, evs[0].DeadLettered)
		require.Equal(t, 3, evs[0].Attempts)
	})

	t.Run("PermanentErrorDeadLettersAtOnce", func(t *testing.T) {
		t.Parallel()
		e, _, _ := setup(t, func(context.Context, *sql.Tx, *outbox.Message) error {
			return outbox.Permanent(errors.New("not an order"))
		}, true, nil)
		f, noID := newFake("m"), newFake("")
		f.canDead, noID.canDead = true, true
		run(t, e, f, noID)
		_, _, dead := f.counts(t)
		require.Len(t, dead, 1)
		require.Equal(t, 1, dead[0].Attempts)
		_, _, dead = noID.counts(t)
		require.Len(t, dead, 1)
		require.ErrorIs(t, dead[0].Err, inbox.ErrNoMessageID)
	})

	t.Run("PanicCountsAsFailure", func(t *testing.T) {
		t.Parallel()
		e, _, _ := setup(t, func(context.Context, *sql.Tx, *outbox.Message) error { panic("nil map") }, true, nil)
		f := newFake("m")
		f.canDead = true
		run(t, e, f)
		_, _, dead := f.counts(t)
		require.Len(t, dead, 1)
		require.ErrorContains(t, dead[0].Err, "panic: nil map")
	})

	t.Run("WithoutDeadLetterRetriesUntilSuccess", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int64
		e, _, ev := setup(t, func(context.Context, *sql.Tx, *outbox.Message) error {
			if runs.Add(1) < 6 {
				return errors.New("not yet")
			}
			return nil
		}, true, nil)
		f := newFake("m")
		run(t, e, f)
		acks, _, _ := f.counts(t)
		require.Equal(t, 1, acks)
		require.Equal(t, int64(6), runs.Load())
		require.Equal(t, 6, ev.all()[0].Attempts)
		f.mu.Lock()
		require.GreaterOrEqual(t, f.extends, 5, "the broker was not told during the waits")
		f.mu.Unlock()
	})

	t.Run("DatabaseOutageDoesNotSpendAttempts", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int64
		e, in, ev := setup(t, func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
			runs.Add(1)
			return nil
		}, false, func(c *Config) { c.MaxAttempts = 1 }) // the table does not exist yet
		f := newFake("m")
		f.canDead = true
		ctx := context.Background()
		p := e.Start(ctx)
		require.NoError(t, p.Submit(ctx, f))
		testsvc.Eventually(t, 10*time.Second, func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.extends >= 6 // three waits after failed inserts
		}, "the engine did not retry the inbox")
		require.NoError(t, in.Migrate(ctx)) // the database is back
		f.wait(t)
		p.Close()
		acks, _, dead := f.counts(t)
		require.Equal(t, 1, acks)
		require.Empty(t, dead, "an outage spent the message's attempts")
		require.Equal(t, int64(1), runs.Load())
		require.Equal(t, inbox.Processed, ev.all()[0].Outcome)
	})

	t.Run("StopAbandonsAndSubmitAfterStopAbandons", func(t *testing.T) {
		t.Parallel()
		e, _, ev := setup(t, func(context.Context, *sql.Tx, *outbox.Message) error { return errors.New("boom") },
			true, func(c *Config) { c.RetryBase, c.RetryCap, c.MaxAttempts = time.Hour, time.Hour, 100 })
		ctx, cancel := context.WithCancel(context.Background())
		p := e.Start(ctx)
		f := newFake("m")
		require.NoError(t, p.Submit(ctx, f))
		testsvc.Eventually(t, 10*time.Second, func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.extends > 0 // waiting an hour before its second run
		}, "the handler never failed")
		cancel()
		f.wait(t)
		late := newFake("late")
		require.ErrorIs(t, p.Submit(ctx, late), context.Canceled)
		p.Close()
		_, aborts, _ := f.counts(t)
		require.Equal(t, 1, aborts)
		_, aborts, _ = late.counts(t)
		require.Equal(t, 1, aborts)
		require.Empty(t, ev.all())
	})

	t.Run("OrderedLanesKeepKeyOrder", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		seen := map[string][]int{}
		e, _, _ := setup(t, func(_ context.Context, _ *sql.Tx, m *outbox.Message) error {
			var seq int
			_, _ = fmt.Sscanf(m.MessageID, m.AggregateID+"-%d", &seq)
			mu.Lock()
			seen[m.AggregateID] = append(seen[m.AggregateID], seq)
			mu.Unlock()
			return nil
		}, true, func(c *Config) { c.Concurrency, c.Ordered = 4, true })
		var ds []*fake
		for i := range 20 {
			for _, k := range []string{"a", "b", "c"} {
				f := newFake(fmt.Sprintf("%s-%d", k, i))
				f.msg.AggregateID = k
				ds = append(ds, f)
			}
		}
		run(t, e, ds...)
		for k, seqs := range seen {
			for i, s := range seqs {
				require.Equal(t, i, s, "key %s: %v", k, seqs)
			}
		}
	})
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	e := &Engine{cfg: Config{RetryBase: 100 * time.Millisecond, RetryCap: time.Second}}
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {3, 400 * time.Millisecond},
		{4, 800 * time.Millisecond}, {5, time.Second}, {50, time.Second},
	} {
		for range 20 {
			got := e.backoff(tc.n)
			require.GreaterOrEqual(t, got, tc.want*8/10, "attempt %d", tc.n)
			require.LessOrEqual(t, got, tc.want*12/10, "attempt %d", tc.n)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"Defaults", func(*Config) {}, ""},
		{"Concurrency", func(c *Config) { c.Concurrency = 0 }, "WithConcurrency"},
		{"TooConcurrent", func(c *Config) { c.Concurrency = 10_001 }, "WithConcurrency"},
		{"MaxAttempts", func(c *Config) { c.MaxAttempts = 0 }, "WithMaxAttempts"},
		{"CapBelowBase", func(c *Config) { c.RetryCap = c.RetryBase / 2 }, "WithRetryBackoff"},
		{"Logger", func(c *Config) { c.Logger = nil }, "WithLogger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestMessageFromHeadersAndDeadHeaders(t *testing.T) {
	t.Parallel()
	h := (&outbox.Message{MessageID: "id", AggregateType: "order", AggregateID: "7", EventType: "PAID",
		Headers: map[string]string{"traceparent": "00-x"}}).StandardHeaders()
	m := MessageFromHeaders(h, []byte(`{"a":1}`))
	require.Equal(t, "id", m.MessageID)
	require.Equal(t, "order", m.AggregateType)
	require.Equal(t, "7", m.AggregateID)
	require.Equal(t, "PAID", m.EventType)
	require.Equal(t, "00-x", m.Headers["traceparent"])
	require.JSONEq(t, `{"a":1}`, string(m.Payload))

	dh := Dead{Consumer: "c", Attempts: 4, Err: errors.New("why")}.Headers(h)
	require.Equal(t, "why", dh[inbox.HeaderDeadReason])
	require.Equal(t, "4", dh[inbox.HeaderDeadAttempts])
	require.Equal(t, "c", dh[inbox.HeaderDeadConsumer])
	require.Equal(t, "id", dh[outbox.HeaderMessageID])
	require.NotContains(t, h, inbox.HeaderDeadReason, "Headers changed its input")
}
