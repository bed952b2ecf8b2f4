package publishertest

import (
	"context"
	"sync"
)

// Collector is a [Receiver] for push-style consumers (an HTTP handler, an
// AMQP delivery loop, a NATS subscription callback): the consumer calls Add
// for each message it gets, and the suite's Receive takes them in order.
// The zero value is ready to use; it is safe for concurrent use.
type Collector struct {
	mu     sync.Mutex
	queue  []Received
	notify chan struct{} // closed and replaced when a message is added
}

// Add appends r to the messages waiting to be received. It never blocks.
func (c *Collector) Add(r Received) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, r)
	if c.notify != nil {
		close(c.notify)
		c.notify = nil
	}
}

// Receive waits until n messages were added since the previous Receive and
// returns them in the order they were added; when ctx ends first it returns
// those that were and ctx's error.
func (c *Collector) Receive(ctx context.Context, n int) ([]Received, error) {
	for {
		c.mu.Lock()
		if len(c.queue) >= n {
			out := append([]Received(nil), c.queue[:n]...)
			c.queue = c.queue[n:]
			c.mu.Unlock()
			return out, nil
		}
		if c.notify == nil {
			c.notify = make(chan struct{})
		}
		wait := c.notify
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			c.mu.Lock()
			k := min(n, len(c.queue))
			out := append([]Received(nil), c.queue[:k]...)
			c.queue = c.queue[k:]
			c.mu.Unlock()
			return out, ctx.Err()
		}
	}
}

// Pending returns how many added messages have not been received yet.
func (c *Collector) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}
