package publishertest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/publisher/publishertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memBroker is an in-memory broker with the features the suite can check,
// used to test the suite itself. Real adapters run the suite against their
// real brokers. fault names a deliberate defect (see TestSuiteCatchesDefects).
type memBroker struct {
	limit int    // message size limit; 0 none
	fault string // "" for a correct broker

	mu      sync.Mutex
	state   string        // "up", "down", "stalled"
	changed chan struct{} // closed and replaced when state changes
	seen    map[string]bool
	out     publishertest.Collector
}

func newMemBroker(limit int, fault string) *memBroker {
	return &memBroker{limit: limit, fault: fault, state: "up", changed: make(chan struct{}), seen: map[string]bool{}}
}

func (b *memBroker) set(state string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state = state
	close(b.changed)
	b.changed = make(chan struct{})
}

var errDown = errors.New("mem broker: connection refused")

func (b *memBroker) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	if b.fault == "short-results" && len(msgs) > 1 {
		errs = errs[:len(msgs)-1]
	}
	if err := ctx.Err(); err != nil && b.fault != "ignore-ctx" {
		return outbox.ErrorsFor(len(errs), fmt.Errorf("publish: %w", err))
	}
	for {
		b.mu.Lock()
		state, changed := b.state, b.changed
		b.mu.Unlock()
		switch state {
		case "down":
			if b.fault == "unclassified-down" {
				return outbox.ErrorsFor(len(errs), errDown)
			}
			return outbox.ErrorsFor(len(errs), outbox.Unavailable(errDown))
		case "stalled":
			select {
			case <-ctx.Done():
				return outbox.ErrorsFor(len(errs), fmt.Errorf("await ack: %w", ctx.Err()))
			case <-changed:
				continue
			}
		}
		break
	}
	order := slices.Clone(msgs)
	if b.fault == "reorder" {
		slices.Reverse(order)
	}
	var refused []*outbox.Message
	for _, m := range order {
		i := slices.Index(msgs, m)
		if i >= len(errs) {
			continue
		}
		if b.limit > 0 && len(m.Payload) > b.limit {
			errs[i] = outbox.Permanent(fmt.Errorf("payload of %d bytes over the limit of %d", len(m.Payload), b.limit))
			refused = append(refused, m)
			continue
		}
		b.mu.Lock()
		dup := b.seen[m.MessageID] && b.fault != "no-dedup"
		b.seen[m.MessageID] = true
		b.mu.Unlock()
		if dup {
			continue // confirmed, dropped
		}
		r := received(m)
		if b.fault == "drop-headers" {
			r.Headers = nil
		}
		b.out.Add(r)
		if b.fault == "redeliver" { // an at-least-once consumer getting the message again
			b.out.Add(r)
		}
	}
	if b.fault == "deliver-refused" { // refused, yet delivered after its batch-mates
		for _, m := range refused {
			b.out.Add(received(m))
		}
	}
	if b.fault == "too-large-fails-batch" && slices.ContainsFunc(errs, outbox.IsPermanent) {
		return outbox.ErrorsFor(len(errs), outbox.Permanent(errors.New("batch refused")))
	}
	return errs
}

// received is m as the broker's consumer gets it.
func received(m *outbox.Message) publishertest.Received {
	return publishertest.Received{
		MessageID: m.MessageID, Key: m.Key(), Topic: m.Destination(),
		Headers: m.StandardHeaders(), Payload: slices.Clone(m.Payload),
		ContentType: m.MediaType(),
	}
}

func (b *memBroker) Ping(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != "up" {
		return fmt.Errorf("ping: broker %s", b.state)
	}
	return ctx.Err()
}

var _ outbox.Pinger = (*memBroker)(nil)

const memLimit = 4096

func memHarness(fault string) publishertest.Harness {
	return publishertest.Harness{
		New: func(t *testing.T) publishertest.Dest {
			b := newMemBroker(memLimit, fault)
			return publishertest.Dest{Publisher: b, Receiver: &b.out, Topic: "orders"}
		},
		Outage: func(t *testing.T) publishertest.OutageDest {
			b := newMemBroker(memLimit, fault)
			return publishertest.OutageDest{
				Dest:    publishertest.Dest{Publisher: b, Receiver: &b.out, Topic: "orders"},
				Cut:     func() { b.set("down") },
				Restore: func() { b.set("up") },
				Stall:   func() { b.set("stalled") },
			}
		},
		Down: func(t *testing.T) outbox.Publisher {
			b := newMemBroker(memLimit, fault)
			b.set("down")
			return b
		},
		PublishTimeout: 500 * time.Millisecond,
	}
}

var memFeatures = publishertest.Features{
	OrderedPerKey: true, Dedup: true, Headers: true, MaxPayload: memLimit, TooLargePayload: memLimit + 1,
	ContentType: true,
}

// TestMemBroker runs the whole suite against a correct broker: every case
// runs (none skips) and passes. With PUBLISHERTEST_FAULT set it runs a
// defective one, for TestSuiteCatchesDefects, or (fault "redeliver") an
// at-least-once one without dedup, for TestSuiteAllowsRedelivery.
func TestMemBroker(t *testing.T) {
	fault := os.Getenv("PUBLISHERTEST_FAULT")
	if fault != "" && os.Getenv("PUBLISHERTEST_CHILD") != "1" {
		t.Skip("PUBLISHERTEST_FAULT is for the child processes of TestSuiteCatchesDefects")
	}
	f := memFeatures
	if fault == "redeliver" {
		f.Dedup = false
	}
	publishertest.Run(t, f, memHarness(fault))
}

// runChild runs one case of TestMemBroker against a broker with fault in a
// child process and returns its output and exit error.
func runChild(t *testing.T, fault, subtest string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0],
		"-test.run", "^TestMemBroker$/^"+subtest+"$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), "PUBLISHERTEST_CHILD=1", "PUBLISHERTEST_FAULT="+fault)
	return cmd.CombinedOutput()
}

// TestSuiteCatchesDefects runs single cases of the suite against brokers
// with one defect each, in a child process, and requires that case to fail:
// a suite that cannot fail proves nothing.
func TestSuiteCatchesDefects(t *testing.T) {
	if os.Getenv("PUBLISHERTEST_CHILD") == "1" {
		t.Skip("child process")
	}
	t.Parallel()
	for _, tc := range []struct {
		fault, subtest, want string
	}{
		{"short-results", "OneResultPerMessage", "Publish must return one result per message"},
		{"drop-headers", "MessageArrivesIntact", "map[string]string(nil) does not contain"},
		{"reorder", "OrderPerKey", "arrived out of publish order"},
		{"no-dedup", "ResendIsConfirmed", "a re-sent message id reached the consumer twice"},
		{"ignore-ctx", "CancelledContext", "confirmed with a cancelled ctx"},
		{"unclassified-down", "BrokerDown", "want outbox.Unavailable"},
		{"unclassified-down", "OutageCutAndRestore", "want outbox.Unavailable"},
		{"too-large-fails-batch", "TooLargePayloadIsPermanent", "batch-mate before the large message"},
		{"deliver-refused", "TooLargePayloadIsPermanent", "arrived but was never confirmed (refused by the broker"},
	} {
		t.Run(tc.fault+"/"+tc.subtest, func(t *testing.T) {
			t.Parallel()
			out, err := runChild(t, tc.fault, tc.subtest)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the suite passed a broker with defect %q:\n%s", tc.fault, out)
			require.Contains(t, string(out), "--- FAIL: TestMemBroker/"+tc.subtest, "%s", out)
			require.Contains(t, string(out), tc.want, "the case failed for another reason:\n%s", out)
		})
	}
}

// TestSuiteAllowsRedelivery runs the case that checks that nothing more
// arrives after a refused message against an at-least-once broker without
// dedup whose consumer gets every message twice: a confirmed message
// arriving again is no defect there, so the case must pass.
func TestSuiteAllowsRedelivery(t *testing.T) {
	if os.Getenv("PUBLISHERTEST_CHILD") == "1" {
		t.Skip("child process")
	}
	t.Parallel()
	for _, subtest := range []string{"TooLargePayloadIsPermanent"} {
		t.Run(subtest, func(t *testing.T) {
			t.Parallel()
			out, err := runChild(t, "redeliver", subtest)
			require.NoError(t, err, "the suite failed an at-least-once broker:\n%s", out)
			require.Contains(t, string(out), "--- PASS: TestMemBroker/"+subtest, "%s", out)
		})
	}
}

func TestCollector(t *testing.T) {
	t.Parallel()
	var c publishertest.Collector

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	got, err := c.Receive(ctx, 1)
	require.Empty(t, got)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() { c.Add(publishertest.Received{MessageID: fmt.Sprint(i)}) })
	}
	got, err = c.Receive(t.Context(), 7) // waits for adds that may not have happened yet
	require.NoError(t, err)
	require.Len(t, got, 7)
	wg.Wait()
	require.Equal(t, 3, c.Pending())

	ctx, cancel = context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	rest, err := c.Receive(ctx, 5)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Len(t, rest, 3, "a short Receive returns what did arrive")
	all := append(got, rest...)
	ids := make([]string, len(all))
	for i, r := range all {
		ids[i] = r.MessageID
	}
	require.ElementsMatch(t, []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}, ids)
	require.Zero(t, c.Pending())
}
