package outbox

import (
	"context"
	"errors"
)

// Publisher sends a batch of messages to a broker. Publish returns exactly
// len(msgs) errors in the same order; nil means the broker confirmed that
// message (it is durable there). Publishers never retry on their own: the
// relay owns backoff. A publisher marks what retrying cannot fix with
// [Permanent] and a destination that is unreachable as a whole with
// [Unavailable]. Implementations are safe for concurrent use.
type Publisher interface {
	Publish(ctx context.Context, msgs []*Message) []error
}

// ErrPermanent is matched (errors.Is) by every error wrapped with [Permanent].
var ErrPermanent = errors.New("outbox: permanent failure")

// ErrUnavailable is matched (errors.Is) by every error wrapped with [Unavailable].
var ErrUnavailable = errors.New("outbox: destination unavailable")

type classified struct {
	err   error
	class error
}

func (e *classified) Error() string        { return e.err.Error() }
func (e *classified) Unwrap() []error      { return []error{e.err, e.class} }
func (e *classified) Is(target error) bool { return target == e.class }

// Permanent marks err as a failure that retrying cannot fix (the broker refused
// the message as such: too large, unroutable, rejected). The relay marks such
// a message dead at once. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: ErrPermanent}
}

// Unavailable marks err as the destination being unreachable as a whole (no
// connection, broker down). When every message of a batch fails this way the
// relay pauses and probes instead of spending the messages' attempts.
// Unavailable(nil) is nil.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: ErrUnavailable}
}

// ErrUnroutable is matched (errors.Is) by every error wrapped with [Unroutable].
var ErrUnroutable = errors.New("outbox: no destination for the message")

// Unroutable marks err as the broker having no destination for the message
// yet: no queue bound to its routing key (RabbitMQ's 312 NO_ROUTE), no
// stream for its subject (NATS), an unknown topic (Kafka). Such a
// destination often appears later (its consumer is being deployed), so the
// mark keeps err retryable and keeps any other class it has; a publisher
// option or a router route that wants such a message dead at once adds
// [Permanent] (see amqppub.WithUnroutablePermanent and
// router.Route.UnroutablePermanent). Unroutable(nil) is nil.
func Unroutable(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: ErrUnroutable}
}

// IsUnroutable reports whether err was marked with [Unroutable].
func IsUnroutable(err error) bool { return errors.Is(err, ErrUnroutable) }

// IsPermanent reports whether err was marked with [Permanent].
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// IsUnavailable reports whether err was marked with [Unavailable].
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// ErrorsFor returns a slice of n copies of err, for a publisher whose whole
// batch failed the same way.
func ErrorsFor(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
