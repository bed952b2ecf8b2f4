package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// extrasDone reports whether the table has what the Store's options add to
// the migrations: the NOTIFY trigger, the batch lease table and the table
// of relays.
func (s *Store) extrasDone(ctx context.Context) (bool, error) {
	for _, done := range []func(context.Context) (bool, error){s.notifyTriggerDone, s.batchLeaseDone, s.relaysDone} {
		if ok, err := done(ctx); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// installExtras adds, in the migration's transaction, what the Store's
// options need beyond the migrations.
func (s *Store) installExtras(ctx context.Context, tx pgx.Tx) error {
	if err := s.installNotifyTrigger(ctx, tx); err != nil {
		return err
	}
	if err := s.installBatchLease(ctx, tx); err != nil {
		return err
	}
	return s.installRelays(ctx, tx)
}
