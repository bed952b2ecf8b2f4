package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// TestCommitPublishesRollbackDoesNot interleaves committed and rolled-back
// transactions and checks, after the relay has drained, that every committed
// message arrived exactly once and no rolled-back one ever did.
func TestCommitPublishesRollbackDoesNot(t *testing.T) {
	t.Parallel()
	for name, newBackend := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			be, br := newBackend(t, false), newBroker(t)
			ctx := context.Background()
			var committed, rolledBack []string
			for i := range 300 {
				m := orderMsg(i, 20)
				commit := i%3 != 0
				err := be.write(ctx, commit, m)
				if commit {
					require.NoError(t, err)
					committed = append(committed, m.MessageID)
				} else {
					if err != nil {
						require.ErrorIs(t, err, errRollback)
					}
					rolledBack = append(rolledBack, m.MessageID)
				}
			}
			runRelay(t, be.store, br.publisher(t))
			br.waitDistinct(t, len(committed), 30*time.Second)
			// Let the relay look again: nothing else may appear.
			testsvc.Eventually(t, 10*time.Second, func() bool {
				return mustCount(t, be, "status = 0") == 0
			}, "outbox not drained")
			for _, id := range committed {
				require.Equal(t, 1, br.deliveries(id), "committed message %s", id)
			}
			for _, id := range rolledBack {
				require.Zero(t, br.deliveries(id), "rolled-back message %s was published", id)
			}
			require.Zero(t, mustCount(t, be, "1=1")-int64(len(committed)), "rolled-back rows left in the table")
		})
	}
}

// TestFourRelayProcesses drains 20,000 messages with four relay processes at
// once: every message arrives, and no row was ever claimed twice (retry_count
// stays 1 for all), so nothing was published twice.
func TestFourRelayProcesses(t *testing.T) {
	t.Parallel()
	be, br := postgresBackend(t, false), newBroker(t)
	const n = 20_000
	produce(t, be, n, 200)
	cfg := br.childConfig(be)
	cfg.Lease = 10 * time.Second
	var relays []*relayProc
	for range 4 {
		relays = append(relays, startRelay(t, cfg))
	}
	br.waitDistinct(t, n, 120*time.Second)
	for _, r := range relays {
		require.NoError(t, r.stop(10*time.Second))
	}
	distinct, total := br.counts()
	require.Equal(t, n, distinct)
	require.Equal(t, n, total, "duplicates delivered")
	require.EqualValues(t, n, mustCount(t, be, "status = 1 AND retry_count = 1"), "a row was claimed more than once")
	busy := 0
	for _, r := range relays {
		if r.totals().Sent > 0 {
			busy++
		}
	}
	require.GreaterOrEqual(t, busy, 2, "the relays did not share the work")
}

// TestKillNineMidBatch kills a relay process with SIGKILL between the broker's
// confirmation and the acknowledgement, restarts it, and checks that every
// message arrives and that what was published again is bounded by one batch.
func TestKillNineMidBatch(t *testing.T) {
	t.Parallel()
	for name, newBackend := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			be, br := newBackend(t, false), newBroker(t)
			const n = 3_000
			ids := produce(t, be, n, 100)
			cfg := br.childConfig(be)
			cfg.PauseAfterPublish = 250 * time.Millisecond
			p := startRelay(t, cfg)
			// Let it get going, then kill it right after the broker confirmed a batch.
			br.waitDistinct(t, 500, 60*time.Second)
			p.fresh()
			p.waitFor(func(l batchLine) bool { return l.Event == "published" }, 30*time.Second, "a published batch")
			p.kill()
			time.Sleep(300 * time.Millisecond) // let the database finish a statement the relay sent before it died
			inFlight := mustCount(t, be, "status = 0 AND retry_count = 1")
			require.Positive(t, inFlight, "the kill did not land inside a batch")
			require.LessOrEqual(t, inFlight, int64(cfg.Batch), "more than one batch was in flight")

			cfg.PauseAfterPublish = 0
			p2 := startRelay(t, cfg)
			br.waitDistinct(t, n, 60*time.Second)
			require.NoError(t, p2.stop(10*time.Second))
			for _, id := range ids {
				require.GreaterOrEqual(t, br.deliveries(id), 1, "message %s lost", id)
			}
			republished := mustCount(t, be, "retry_count > 1")
			require.Equal(t, inFlight, republished, "only the batch in flight is published again")
			require.LessOrEqual(t, republished, int64(cfg.Batch))
			_, total := br.counts()
			t.Logf("%s: %d messages, %d in flight at the kill, %d published again, %d duplicate deliveries "+
				"(the stream's Nats-Msg-Id window absorbs re-sends)", name, n, inFlight, republished, total-n)
			require.LessOrEqual(t, total-n, cfg.Batch, "duplicates exceed one batch")
			require.Zero(t, mustCount(t, be, "status <> 1"))
		})
	}
}

// TestPausedRelayLateAckIsFenced stops a relay with SIGSTOP between publish and
// ack for longer than its lease, lets another relay take the rows over and
// deliver them, then resumes the first: its late acknowledgement changes nothing.
func TestPausedRelayLateAckIsFenced(t *testing.T) {
	t.Parallel()
	be, br := postgresBackend(t, false), newBroker(t)
	ids := produce(t, be, 500, 100)
	cfg := br.childConfig(be)
	cfg.PauseAfterPublish = 300 * time.Millisecond
	zombie := startRelay(t, cfg)
	zombie.fresh()
	zombie.waitFor(func(l batchLine) bool { return l.Event == "published" }, 30*time.Second, "a published batch")
	zombie.signal(syscall.SIGSTOP)
	held := mustCount(t, be, "status = 0 AND retry_count = 1 AND next_retry_at > now()")
	require.Positive(t, held, "the zombie held no rows when it was stopped")

	time.Sleep(cfg.Lease + 500*time.Millisecond) // outlast the zombie's lease
	runRelay(t, be.store, br.publisher(t))
	br.waitDistinct(t, len(ids), 30*time.Second)
	testsvc.Eventually(t, 10*time.Second, func() bool { return mustCount(t, be, "status = 0") == 0 }, "not drained")
	takenOver := mustCount(t, be, "retry_count = 2")
	require.Equal(t, held, takenOver, "the rows the zombie held were claimed again by the other relay")

	zombie.signal(syscall.SIGCONT)
	zombie.waitFor(func(l batchLine) bool { return l.Event == "batch" && l.Fenced > 0 }, 30*time.Second,
		"the zombie's fenced ack")
	require.NoError(t, zombie.stop(10*time.Second))
	require.EqualValues(t, held, zombie.totals().Fenced, "every row of the zombie's batch was fenced")
	require.Equal(t, takenOver, mustCount(t, be, "retry_count = 2 AND status = 1"), "late ack changed the rows")
	distinct, _ := br.counts()
	require.Equal(t, len(ids), distinct)
}

// TestBrokerOutage cuts the relay's connection to NATS for a minute (shorter
// with OUTBOX_E2E_OUTAGE): no message goes dead because of the outage, the
// relay does not spend attempts on it, and everything arrives once it is back.
func TestBrokerOutage(t *testing.T) {
	t.Parallel()
	outage := time.Minute
	if v := os.Getenv("OUTBOX_E2E_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		outage = d
	}
	be, br := postgresBackend(t, false), newBroker(t)
	proxy := faultproxy.New(t, strings.TrimPrefix(br.url, "nats://"))
	pub := publisherAt(t, "nats://"+proxy.Addr(), br.prefix)
	var downs, ups atomic.Int32
	runRelay(t, be.store, pub, outbox.WithMaxAttempts(3), outbox.WithProbeInterval(200*time.Millisecond, 2*time.Second),
		outbox.WithHooks(destHook{down: &downs, up: &ups}))

	produce(t, be, 200, 50)
	br.waitDistinct(t, 200, 30*time.Second)

	proxy.Cut()
	ids := produce(t, be, 500, 50)
	deadline := time.Now().Add(outage)
	for time.Now().Before(deadline) {
		require.Zero(t, mustCount(t, be, "status = 2"), "a message went dead because of the outage")
		time.Sleep(250 * time.Millisecond)
	}
	require.Positive(t, downs.Load(), "the relay never noticed the destination was down")
	// Refunded attempts: none of the outage's messages used up its attempts.
	require.Zero(t, mustCount(t, be, "retry_count >= 3"))
	proxy.Restore()
	br.waitDistinct(t, 700, 60*time.Second)
	for _, id := range ids {
		require.GreaterOrEqual(t, br.deliveries(id), 1)
	}
	require.Zero(t, mustCount(t, be, "status = 2"))
	require.Positive(t, ups.Load())
}

type destHook struct{ down, up *atomic.Int32 }

func (h destHook) OnDestination(up bool, _ error) {
	if up {
		h.up.Add(1)
	} else {
		h.down.Add(1)
	}
}

// TestPoisonMessages sends, among good messages, one that the broker refuses
// every time (no stream captures its subject) and one it refuses for good (over
// the server's max payload): the first goes dead after max attempts, the second
// at once, and neither blocks the others.
func TestPoisonMessages(t *testing.T) {
	t.Parallel()
	for name, newBackend := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			be, br := newBackend(t, false), newBroker(t)
			ctx := context.Background()
			unroutable := orderMsg(1, 1)
			unroutable.Topic = "ORDER_LOST" // no stream captures <prefix>.ORDER_LOST
			tooBig := orderMsg(2, 1)
			tooBig.Payload = []byte(fmt.Sprintf(`{"blob":"%s"}`, strings.Repeat("x", 2<<20)))
			require.NoError(t, be.write(ctx, true, unroutable, tooBig))
			good := produce(t, be, 300, 30)

			runRelay(t, be.store, br.publisher(t), outbox.WithMaxAttempts(3), outbox.WithRelayMaxPayloadSize(0))
			br.waitDistinct(t, len(good), 30*time.Second)
			deadline := time.Now().Add(30 * time.Second)
			for mustCount(t, be, "status = 2") != 2 {
				if time.Now().After(deadline) {
					dump(t, be)
					t.Fatal("both poison messages should be dead")
				}
				time.Sleep(20 * time.Millisecond)
			}
			require.Zero(t, br.deliveries(unroutable.MessageID))
			require.Zero(t, br.deliveries(tooBig.MessageID))
			require.EqualValues(t, 1, mustCount(t, be, fmt.Sprintf("message_id = '%s' AND retry_count = 1", tooBig.MessageID)),
				"a permanent failure goes dead on its first attempt")
			require.EqualValues(t, 1, mustCount(t, be, fmt.Sprintf("message_id = '%s' AND retry_count = 3", unroutable.MessageID)),
				"a refused message goes dead after max attempts")
			require.EqualValues(t, len(good), mustCount(t, be, "status = 1"))
		})
	}
}

// TestContractOnlyTable runs the relay on a table created by hand with only the
// contract's columns.
func TestContractOnlyTable(t *testing.T) {
	t.Parallel()
	for name, newBackend := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			be, br := newBackend(t, true), newBroker(t)
			ids := produce(t, be, 400, 40)
			runRelay(t, be.store, br.publisher(t))
			br.waitDistinct(t, len(ids), 30*time.Second)
			testsvc.Eventually(t, 10*time.Second, func() bool { return mustCount(t, be, "status = 1") == 400 },
				"rows marked sent")
		})
	}
}

// TestWriteRejectsBadInput checks that invalid messages are refused at write
// time with a clear error, before the caller's transaction is touched: the
// same transaction then writes a good message and commits.
func TestWriteRejectsBadInput(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		edit  func(*outbox.Message)
		field string
	}{
		{"InvalidJSON", func(m *outbox.Message) { m.Payload = []byte(`{"a":`) }, "Payload"},
		{"EmptyPayload", func(m *outbox.Message) { m.Payload = nil }, "Payload"},
		{"EmptyAggregateType", func(m *outbox.Message) { m.AggregateType = "" }, "AggregateType"},
		{"EmptyAggregateID", func(m *outbox.Message) { m.AggregateID = "" }, "AggregateID"},
		{"EmptyEventType", func(m *outbox.Message) { m.EventType = "" }, "EventType"},
		{"Oversized", func(m *outbox.Message) { m.Payload = []byte(`"` + strings.Repeat("x", 5<<20) + `"`) }, "Payload"},
		{"LongEventType", func(m *outbox.Message) { m.EventType = strings.Repeat("E", 65) }, "EventType"},
	}
	for name, newBackend := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			be := newBackend(t, false)
			for _, tc := range cases {
				err := be.tx(context.Background(), func(write func(...*outbox.Message) error) error {
					ok, bad := orderMsg(1, 1), orderMsg(2, 1)
					tc.edit(bad)
					err := write(ok, bad)
					var verr *outbox.ValidationError
					require.ErrorAs(t, err, &verr, tc.name)
					require.ErrorIs(t, err, outbox.ErrInvalidMessage)
					require.Equal(t, tc.field, verr.Field, tc.name)
					require.Equal(t, 1, verr.Index, tc.name)
					require.Contains(t, err.Error(), tc.field)
					return write(orderMsg(3, 1)) // the transaction is still usable
				})
				require.NoError(t, err, tc.name)
			}
			require.EqualValues(t, len(cases), mustCount(t, be, "1=1"), "exactly the good message of each transaction")
		})
	}
}

var _ = errors.New
