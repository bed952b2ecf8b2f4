package outboxtest

import (
	"context"
	"sync"

	"github.com/outboxkit/outbox"
)

// Publisher is an in-memory outbox.Publisher that records every message it
// confirms, in the order it confirmed them, duplicates included. Its zero
// value is not usable; call NewPublisher. It is safe for concurrent use.
type Publisher struct {
	mu      sync.Mutex
	sent    []*outbox.Message
	fail    func(*outbox.Message) error
	deliver []func(*outbox.Message)
}

var _ outbox.Publisher = (*Publisher)(nil)

// NewPublisher returns an empty recording publisher that confirms everything.
func NewPublisher() *Publisher { return &Publisher{} }

// Publish records each message unless the function set by FailWith returns an
// error for it, in which case that error is the message's result. It honours a
// cancelled ctx by failing the whole batch.
func (p *Publisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	if err := ctx.Err(); err != nil {
		return outbox.ErrorsFor(len(msgs), err)
	}
	p.mu.Lock()
	fail, deliver := p.fail, p.deliver
	var ok []*outbox.Message
	for i, m := range msgs {
		if fail != nil {
			if errs[i] = fail(m); errs[i] != nil {
				continue
			}
		}
		c := *m // the relay may reuse its messages; keep our own copy
		p.sent = append(p.sent, &c)
		ok = append(ok, &c)
	}
	p.mu.Unlock()
	for _, m := range ok {
		for _, d := range deliver {
			d(m)
		}
	}
	return errs
}

// FailWith makes Publish return fn's error for each message for which it is
// not nil (wrap it with outbox.Permanent or outbox.Unavailable to test those
// paths). FailWith(nil) makes every message succeed again.
func (p *Publisher) FailWith(fn func(*outbox.Message) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = fn
}

// OnDeliver calls fn, outside the publisher's lock, for every message as it is
// confirmed: hand it to the consumer under test.
func (p *Publisher) OnDeliver(fn func(*outbox.Message)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deliver = append(p.deliver, fn)
}

// Messages returns a copy of everything confirmed so far, in order.
func (p *Publisher) Messages() []*outbox.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*outbox.Message(nil), p.sent...)
}

// Count returns how many deliveries were confirmed, duplicates included.
func (p *Publisher) Count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sent)
}

// Duplicates returns, for each message ID confirmed more than once, how many
// times it was confirmed.
func (p *Publisher) Duplicates() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := make(map[string]int, len(p.sent))
	for _, m := range p.sent {
		seen[m.MessageID]++
	}
	for id, n := range seen {
		if n < 2 {
			delete(seen, id)
		}
	}
	return seen
}

// Reset forgets everything recorded.
func (p *Publisher) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = nil
}
