package pgstore

import (
	"context"

	"github.com/outboxkit/outbox"
)

// OrderedWalkSQL returns the bounded walk of ordered claims ($1 limit, $2
// lease in µs, $3 window), for tests that look at its plan.
func OrderedWalkSQL(ctx context.Context, s *Store, blockOnDead bool) (string, error) {
	q, err := s.queriesFor(ctx, s.poolRow)
	if err != nil {
		return "", err
	}
	st, err := s.orderedFor(ctx, q)
	if err != nil {
		return "", err
	}
	if blockOnDead {
		return st.q[1].walk, nil
	}
	return st.q[0].walk, nil
}

// OrderedWindow is the number of rows the walk looks at for a claim of limit rows.
var OrderedWindow = orderedWindow

// HeadsPause is how many heads claims on a table without the head index
// read only their window after one that found no head in the whole backlog.
const HeadsPause = headsPause

// WithHeadsOnlyClaims makes ordered claims take heads only, as before runs,
// for the tests of the heads claim (ordered.go) that runs claims fall back on.
func WithHeadsOnlyClaims() Option { return func(c *config) { c.headsOnly = true } }

// RunsSQL returns the runs claim statement that Claim would run for p, with
// the parameters that follow its first four ($1 limit, $2 lease in µs, $3
// and $4 the id range), up to the payload limit that comes last, for tests
// that look at its plan.
func RunsSQL(ctx context.Context, s *Store, p outbox.ClaimParams) (string, []any, error) {
	q, err := s.queriesFor(ctx, s.poolRow)
	if err != nil {
		return "", nil, err
	}
	st, err := s.orderedFor(ctx, q)
	if err != nil {
		return "", nil, err
	}
	ix, err := s.indexesFor(ctx)
	if err != nil {
		return "", nil, err
	}
	sql, args := runsStatement(st, ix, p)
	if !ix.pending && !st.headIndex { // candidates chosen by aggregate: how many to read
		args = append(args, aggregatesToRead(p.Limit, 0))
	}
	return sql, args, nil
}
