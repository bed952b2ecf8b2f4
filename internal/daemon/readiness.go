package daemon

import (
	"context"
	"fmt"
	"sync"
)

// claimFailuresNotReady is how many claims in a row must fail for /readyz
// to say not ready: one failure is a blip the relay retries, three (about
// three poll intervals, the relay backing off between them) is a table or
// database that stays broken.
const claimFailuresNotReady = 3

// claimHealth follows the relays' claims (an outbox.HookClaim) for /readyz:
// pings can all pass while every claim fails, on a table changed under the
// relay (a column dropped, its type changed). Safe for concurrent use.
type claimHealth struct {
	mu       sync.Mutex
	failures int   // claims failed in a row, over every relay loop
	last     error // the last failure's error
}

// OnClaim records a claim's outcome; a success (rows or none) resets the count.
func (c *claimHealth) OnClaim(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.failures, c.last = 0, nil
		return
	}
	c.failures++
	c.last = err
}

// Probe fails while the last claimFailuresNotReady claims or more failed.
func (c *claimHealth) Probe(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failures >= claimFailuresNotReady {
		return fmt.Errorf("the last %d claims failed: %w", c.failures, c.last)
	}
	return nil
}
