package pgstore

import "context"

// RelaySQL returns the unordered claim and the keep-as-sent ack statements
// the Store runs, for tests that run them inside a transaction of their own.
func RelaySQL(ctx context.Context, s *Store) (claim, ack string, err error) {
	q, err := s.queriesFor(ctx, s.poolRow)
	if err != nil {
		return "", "", err
	}
	return q.claim[claimUnordered], q.ack, nil
}
