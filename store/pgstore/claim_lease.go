package pgstore

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/outboxkit/outbox"
)

// Row leases, the default way to claim: each claim statement writes every
// row it takes, counting the attempt in retry_count and leasing the row
// until next_retry_at. Unordered claims start at the claim cursor
// (store.go); ordered claims take runs (runs.go), or heads only
// (ordered.go) in the tests of the heads claim.

// rowLeaseClaimer claims with row leases.
type rowLeaseClaimer struct {
	s       *Store
	ordered func(ctx context.Context, q *queries, p outbox.ClaimParams) (*outbox.Claim, error) // claimRuns or claimHeads
	// noBatchLeases is set once checkNoBatchLeases has passed.
	noBatchLeases atomic.Bool
}

func (r *rowLeaseClaimer) claim(ctx context.Context, q *queries, p outbox.ClaimParams) (*outbox.Claim, error) {
	if err := r.checkNoBatchLeases(ctx); err != nil {
		return nil, err
	}
	if p.Ordered {
		return r.ordered(ctx, q, p)
	}
	s, mp, lease := r.s, payloadLimit(p.MaxPayload), p.Lease.Microseconds()
	ix, err := s.indexesFor(ctx)
	if err != nil {
		return nil, err
	}
	if !ix.pending { // indexes.go
		claim := &outbox.Claim{}
		if err := s.claimRows(ctx, claim, q, q.claimStatus, nil, mp, p.Limit, lease); err != nil {
			return nil, err
		}
		sortClaim(claim)
		return claim, nil
	}
	return s.fromCursor(&s.claimCursor, p.Limit, func(limit int, lo, hi int64) (*outbox.Claim, error) {
		claim := &outbox.Claim{}
		return claim, s.claimRows(ctx, claim, q, q.claim[claimUnordered], nil, mp, limit, lease, lo, hi)
	})
}

// checkNoBatchLeases makes sure, before the first claim, that no relay
// holds batch leases on the table: such a relay's claimed rows look pending
// to every other kind of claim, which would publish them a second time.
// Once the check passes it does not ask again; until then, each claim asks
// (and fails).
func (r *rowLeaseClaimer) checkNoBatchLeases(ctx context.Context) error {
	if r.noBatchLeases.Load() {
		return nil
	}
	s := r.s
	side := s.sideTable()
	var exists bool
	if err := s.pool.QueryRow(ctx, tableExists, side).Scan(&exists); err != nil {
		return fmt.Errorf("pgstore: claim: read catalog: %w", err)
	}
	if exists {
		var live bool
		err := s.pool.QueryRow(ctx, fmt.Sprintf(
			"SELECT EXISTS (SELECT 1 FROM %s WHERE expires_at > now() AND cardinality(ids) > 0)", side)).Scan(&live)
		if err != nil {
			return fmt.Errorf("pgstore: claim: read %s: %w", side, err)
		}
		if live {
			return fmt.Errorf("pgstore: claim: %s holds live batch leases: another relay claims table %s with "+
				"WithBatchLease (batch_lease), and claims without it would publish its rows again; give every relay of "+
				"a table the same setting (stop them all to switch, and wait out the lease)", side, s.cfg.table)
		}
	}
	r.noBatchLeases.Store(true)
	return nil
}
