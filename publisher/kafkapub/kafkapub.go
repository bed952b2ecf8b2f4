package kafkapub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultProbeAfter is how long a Publish waits for the brokers' answers
// before it checks, in the background, whether any broker answers at all.
const DefaultProbeAfter = time.Second

// maxTopicLength is Kafka's limit on a topic name.
const maxTopicLength = 249

// Publisher sends outbox messages to Kafka through a franz-go client. It is
// safe for concurrent use. It never closes the client it wraps.
type Publisher struct {
	client *kgo.Client
	cfg    config
}

var (
	_ outbox.Publisher = (*Publisher)(nil)
	_ outbox.Pinger    = (*Publisher)(nil)
)

type config struct {
	topicPrefix string
	probeAfter  time.Duration
}

func defaultConfig() config {
	return config{probeAfter: DefaultProbeAfter}
}

func (c *config) validate() error {
	var errs []error
	if c.probeAfter <= 0 {
		errs = append(errs, fmt.Errorf("WithProbeAfter: %v is not positive", c.probeAfter))
	}
	if len(c.topicPrefix) > maxTopicLength || !validTopic(c.topicPrefix, true) {
		errs = append(errs, fmt.Errorf("WithTopicPrefix: %q is not a valid start of a Kafka topic name", c.topicPrefix))
	}
	return errors.Join(errs...)
}

// Option configures a [Publisher].
type Option func(*config)

// WithTopicPrefix puts prefix in front of every message's destination
// ([outbox.Message.Destination]: its Topic, else its EventType) to make the
// Kafka topic name. Default: "" (the destination as is).
func WithTopicPrefix(prefix string) Option { return func(c *config) { c.topicPrefix = prefix } }

// WithProbeAfter sets how long a Publish waits for confirmations before it
// asks the cluster for metadata in the background. When the publish then runs
// out of time with messages unconfirmed, the probe's outcome decides their
// class: no broker answered means [outbox.Unavailable], a broker answered means
// a plain timeout error. Default: DefaultProbeAfter (1 s), or half of the time
// left before ctx's deadline when that is shorter.
func WithProbeAfter(d time.Duration) Option { return func(c *config) { c.probeAfter = d } }

// New returns a Publisher that produces through client, which the caller
// built (see [NewClient] for one built from a URL) and closes. The client's
// producer settings apply: franz-go's defaults (idempotent writes, acks from
// all in-sync replicas, unlimited retries within the caller's deadline) are
// the ones the outbox relies on, so don't turn idempotence off or lower the
// acks. New panics if client is nil, a programmer error.
func New(client *kgo.Client, opts ...Option) (*Publisher, error) {
	if client == nil {
		panic("kafkapub: New with a nil client")
	}
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("kafkapub: new publisher: %w", err)
	}
	return &Publisher{client: client, cfg: cfg}, nil
}

// Topic returns the Kafka topic m is produced to.
func (p *Publisher) Topic(m *outbox.Message) string { return p.cfg.topicPrefix + m.Destination() }

// Publish produces every message as one record and waits, within ctx, for
// each record's acknowledgement. It returns one error per message, in order:
// nil when the brokers acknowledged the record (acks from all in-sync
// replicas by default).
//
// Each record has key = [outbox.Message.Key] (the aggregate id unless a
// partition key is set, so an aggregate stays in one partition and in order),
// value = the payload, and one header per entry of
// [outbox.Message.StandardHeaders], sorted by name.
//
// Errors: a record Kafka refuses as such (too large, invalid, a bad topic
// name) is [outbox.Permanent]; a missing topic, a refused authorization, a
// closed client or brokers that cannot be reached are [outbox.Unavailable];
// a record still unconfirmed when ctx ends gets an error wrapping ctx.Err(),
// marked Unavailable when no broker answered a metadata request meanwhile (see
// [WithProbeAfter]). Publish returns when ctx ends even if the client still
// holds records; those may still be written later, which is a duplicate the
// message id lets consumers drop.
func (p *Publisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	if len(msgs) == 0 {
		return []error{}
	}
	if err := ctx.Err(); err != nil {
		return outbox.ErrorsFor(len(msgs), fmt.Errorf("kafkapub: publish: %w", err))
	}
	w := newWaiter(len(msgs))
	for i, m := range msgs {
		rec, err := p.record(m)
		if err != nil {
			w.set(i, err)
			continue
		}
		p.client.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil && ctx.Err() == nil && isContextErr(err) {
				// franz-go fails a partition's buffered records together when
				// the first one's context ended: here an earlier Publish's.
				err = fmt.Errorf("kafkapub: failed along with an earlier unconfirmed record of the same partition (%v)", err)
			}
			w.set(i, classify(err))
		})
	}

	var (
		probeErr  = make(chan error, 1)
		probing   bool
		probeDone sync.WaitGroup
	)
	defer probeDone.Wait() // runs after stopProbe
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	probe := time.NewTimer(p.probeDelay(ctx))
	defer probe.Stop()
	for {
		select {
		case <-w.done:
			errs := w.results(nil)
			if ctx.Err() != nil && probing && <-probeErr != nil {
				markUnavailable(ctx, errs)
			}
			return errs
		case <-probe.C:
			probing = true
			probeDone.Go(func() { probeErr <- p.client.Ping(probeCtx) })
		case <-ctx.Done():
			unavailable := false
			if probing {
				// The probe uses ctx too, so it is returning now.
				unavailable = <-probeErr != nil
			}
			errs := w.results(func() error {
				return fmt.Errorf("kafkapub: not acknowledged before the publish ended: %w", ctx.Err())
			})
			if unavailable {
				markUnavailable(ctx, errs)
			}
			return errs
		}
	}
}

// markUnavailable marks the errors of errs that are ctx's end as the
// destination being unavailable, once no broker answered the probe either.
// Records that franz-go failed when ctx ended count too: their results can
// come in before Publish sees ctx end.
func markUnavailable(ctx context.Context, errs []error) {
	for i, err := range errs {
		if err != nil && errors.Is(err, ctx.Err()) && !outbox.IsUnavailable(err) {
			errs[i] = outbox.Unavailable(fmt.Errorf("%w (no broker answered a metadata request either)", err))
		}
	}
}

// probeDelay is how long Publish waits before probing the cluster.
func (p *Publisher) probeDelay(ctx context.Context) time.Duration {
	d := p.cfg.probeAfter
	if deadline, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(deadline)/2)
	}
	return max(d, time.Millisecond)
}

// record builds the Kafka record for m.
func (p *Publisher) record(m *outbox.Message) (*kgo.Record, error) {
	if m == nil {
		return nil, outbox.Permanent(errors.New("kafkapub: nil message"))
	}
	topic := p.Topic(m)
	if len(topic) > maxTopicLength || !validTopic(topic, false) {
		return nil, outbox.Permanent(fmt.Errorf("kafkapub: %q is not a valid Kafka topic name (1 to %d of a-z A-Z 0-9 . _ -)",
			topic, maxTopicLength))
	}
	headers := make([]kgo.RecordHeader, 0, len(m.Headers)+6)
	for k, v := range m.StandardHeadersSeq() {
		if k == HeaderContentType {
			continue // the message's own content type wins
		}
		headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	headers = append(headers, kgo.RecordHeader{Key: HeaderContentType, Value: []byte(m.MediaType())})
	slices.SortFunc(headers, func(a, b kgo.RecordHeader) int { return strings.Compare(a.Key, b.Key) })
	return &kgo.Record{
		Topic:   topic,
		Key:     []byte(m.Key()),
		Value:   m.Payload,
		Headers: headers,
	}, nil
}

// HeaderContentType is the record header that carries the payload's media
// type ([outbox.Message.MediaType]: application/json unless the message sets
// one). Kafka has no content-type field of its own; this is the name most
// consumers look for.
const HeaderContentType = "content-type"

// Ping returns nil when a broker of the cluster answers a metadata request.
func (p *Publisher) Ping(ctx context.Context) error {
	if err := p.client.Ping(ctx); err != nil {
		return fmt.Errorf("kafkapub: ping: %w", err)
	}
	return nil
}

// validTopic reports whether s is made of Kafka's topic characters (and is
// neither empty, ".", nor "..", unless prefix allows a partial name).
func validTopic(s string, prefix bool) bool {
	if !prefix && (s == "" || s == "." || s == "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// permanentCodes are broker answers about the record itself: sending it again
// gets the same answer.
var permanentCodes = []*kerr.Error{
	kerr.MessageTooLarge,
	kerr.RecordListTooLarge,
	kerr.InvalidRecord,
	kerr.CorruptMessage,
	kerr.InvalidTopicException,
	kerr.InvalidRequiredAcks,
	kerr.UnsupportedForMessageFormat,
	kerr.UnsupportedCompressionType,
	kerr.PolicyViolation,
	kerr.InvalidTimestamp,
}

// unavailableCodes say the destination as a whole cannot take records now:
// a missing topic or a refused authorization, fixed by an operator without
// touching the messages.
var unavailableCodes = []*kerr.Error{
	kerr.TopicAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.SaslAuthenticationFailed,
	kerr.IllegalSaslState,
	kerr.UnsupportedSaslMechanism,
}

// unknownTopicCodes say the topic does not exist (yet): unavailable as a
// whole, like unavailableCodes, and also [outbox.Unroutable].
var unknownTopicCodes = []*kerr.Error{
	kerr.UnknownTopicOrPartition,
	kerr.UnknownTopicID,
}

// sessionCodes are non-retriable answers about the producer session (its id,
// epoch or sequence numbers), not the record: a later attempt can succeed.
var sessionCodes = []*kerr.Error{
	kerr.OutOfOrderSequenceNumber,
	kerr.DuplicateSequenceNumber,
	kerr.InvalidProducerEpoch,
	kerr.UnknownProducerID,
	kerr.InvalidProducerIDMapping,
	kerr.ProducerFenced,
}

// classify turns a produce promise's error into the outbox's error classes.
func classify(err error) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("kafkapub: produce: %w", err)
	is := func(codes []*kerr.Error) bool {
		return slices.ContainsFunc(codes, func(c *kerr.Error) bool { return errors.Is(err, c) })
	}
	var netErr net.Error
	switch {
	case isContextErr(err):
		return wrapped
	case is(permanentCodes):
		return outbox.Permanent(wrapped)
	case is(unknownTopicCodes):
		// Marked Unroutable too, so that a route that wants such a message
		// dead can say so.
		return outbox.Unavailable(outbox.Unroutable(wrapped))
	case is(unavailableCodes),
		errors.Is(err, kgo.ErrClientClosed),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.As(err, &netErr):
		return outbox.Unavailable(wrapped)
	case is(sessionCodes):
		return wrapped
	}
	if ke := (*kerr.Error)(nil); errors.As(err, &ke) && !ke.Retriable {
		return outbox.Permanent(wrapped)
	}
	return wrapped
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// waiter collects one result per record; promises may run after Publish
// returned, so results are copied out under the lock.
type waiter struct {
	mu      sync.Mutex
	errs    []error
	got     []bool
	pending int
	done    chan struct{}
}

func newWaiter(n int) *waiter {
	return &waiter{errs: make([]error, n), got: make([]bool, n), pending: n, done: make(chan struct{})}
}

func (w *waiter) set(i int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.got[i] {
		return
	}
	w.errs[i], w.got[i] = err, true
	if w.pending--; w.pending == 0 {
		close(w.done)
	}
}

// results copies the results out; unset ones get missing() when given.
func (w *waiter) results(missing func() error) []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.errs)
	if missing != nil && w.pending > 0 {
		err := missing()
		for i, ok := range w.got {
			if !ok {
				out[i] = err
			}
		}
	}
	return out
}
