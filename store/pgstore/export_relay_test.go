package pgstore

import (
	"context"
	"time"
)

// WithRescanEvery sets how often, at least, an unordered claim starts from
// the first due row (claimCursor), for tests that must not depend on time.
func WithRescanEvery(d time.Duration) Option { return func(c *config) { c.rescanEvery = d } }

// RelaySQL returns the unordered claim and the keep-as-sent ack statements
// the Store runs, for tests that run them inside a transaction of their own.
// The claim takes the limit, the lease in microseconds and the range of ids
// (lo, hi] to claim from.
func RelaySQL(ctx context.Context, s *Store) (claim, ack string, err error) {
	q, err := s.queriesFor(ctx, s.poolRow)
	if err != nil {
		return "", "", err
	}
	return q.claim[claimUnordered], q.ack, nil
}
