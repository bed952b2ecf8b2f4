package outboxtest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
)

// CrashPoint is a moment in a relay's cycle where a real relay can die.
type CrashPoint int

const (
	// CrashBeforePublish: the batch was claimed (its attempt counted) and the
	// relay died before publishing. The messages come back once the lease
	// runs out, one attempt poorer; consumers see no duplicate, only a delay.
	CrashBeforePublish CrashPoint = iota + 1
	// CrashAfterPublish: the broker confirmed the batch and the relay died
	// before marking it sent. The messages are published again: every one is
	// a duplicate for the consumer.
	CrashAfterPublish
	// CrashDuringAck: the mark was sent to the database and the reply was
	// lost. The mark may or may not have committed; this injects the worse
	// outcome (it did not), which also duplicates the batch.
	CrashDuringAck
)

func (p CrashPoint) String() string {
	switch p {
	case CrashBeforePublish:
		return "before publish"
	case CrashAfterPublish:
		return "after publish"
	case CrashDuringAck:
		return "during ack"
	}
	return "unknown crash point"
}

// ErrInjectedCrash is returned by a CrashingStore's Ack when it injects a crash.
var ErrInjectedCrash = errors.New("outboxtest: injected crash")

// CrashingStore wraps a real outbox.Store and injects the effect of a relay
// crash at Point for the next Times batches. Instead of waiting out the lease
// as a restarted relay would, it makes the affected rows due again at once, so
// tests stay fast while the database sees the same sequence of attempts.
// It is safe for concurrent use.
type CrashingStore struct {
	outbox.Store
	point CrashPoint

	mu      sync.Mutex
	left    int
	crashed int
}

// NewCrashingStore wraps store, crashing at point in the next times batches.
func NewCrashingStore(store outbox.Store, point CrashPoint, times int) *CrashingStore {
	return &CrashingStore{Store: store, point: point, left: times}
}

// Crashes returns how many crashes were injected so far.
func (s *CrashingStore) Crashes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashed
}

func (s *CrashingStore) take(p CrashPoint) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.point != p || s.left == 0 {
		return false
	}
	s.left--
	s.crashed++
	return true
}

// Claim claims from the real store. At CrashBeforePublish it then abandons the
// batch: the rows keep their counted attempt, become due again, and the relay
// is handed nothing.
func (s *CrashingStore) Claim(ctx context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	c, err := s.Store.Claim(ctx, p)
	if err != nil || len(c.Messages) == 0 || !s.take(CrashBeforePublish) {
		return c, err
	}
	if err := s.expire(ctx, c.Messages); err != nil {
		return nil, err
	}
	return &outbox.Claim{}, nil
}

// Ack acknowledges through the real store, except at CrashAfterPublish and
// CrashDuringAck, where the mark is lost: the rows become due again with the
// attempt that published them still counted, as when a lease runs out, and
// Ack returns ErrInjectedCrash.
func (s *CrashingStore) Ack(ctx context.Context, p outbox.AckParams) (int, error) {
	if s.take(CrashAfterPublish) || s.take(CrashDuringAck) {
		if err := s.expire(ctx, p.Messages); err != nil {
			return 0, err
		}
		return 0, ErrInjectedCrash
	}
	return s.Store.Ack(ctx, p)
}

// expire makes claimed rows due now, as a lease that ran out would.
func (s *CrashingStore) expire(ctx context.Context, msgs []*outbox.Message) error {
	retries := make([]outbox.Retry, len(msgs))
	now := time.Now().Add(-time.Millisecond)
	for i, m := range msgs {
		retries[i] = outbox.Retry{Message: m, At: now, Err: ErrInjectedCrash.Error()}
	}
	return s.Store.Reschedule(ctx, outbox.RescheduleParams{Retries: retries})
}
