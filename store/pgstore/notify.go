package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listen waits for the notifications that writes send when [WithNotify] is
// on, calling wake (which must not block) for each one, and once right after
// it starts listening, since rows may have committed while no one was. It
// holds a connection of its own, opened with the pool's settings and not
// taken from the pool, until ctx is done; then it returns nil. It returns an
// error when the connection fails, and the relay starts it again. With
// [WithNotifyTrigger] it first makes sure the table has the trigger, and
// returns an error that says to migrate when it does not (the relay polls
// meanwhile, and tries again). When notifications are off, Listen just waits
// for ctx and returns nil.
func (s *Store) Listen(ctx context.Context, wake func()) error {
	if s.channel == "" {
		<-ctx.Done()
		return nil
	}
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("pgstore: listen: connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if s.cfg.notifyTrigger {
		// Writes leave the NOTIFY to the table's trigger: without it, no one
		// would ever wake the relay, which would only poll.
		var ok bool
		if err := conn.QueryRow(ctx, hasNotifyTrigger, s.ident, notifyTriggerName).Scan(&ok); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("pgstore: listen: look for the NOTIFY trigger of %s: %w", s.cfg.table, err)
		}
		if !ok {
			return fmt.Errorf("pgstore: listen: table %s has no NOTIFY trigger, so writes wake no one: run Migrate "+
				"with WithNotifyTrigger (outbox migrate --notify-trigger); polling until it is there", s.cfg.table)
		}
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("pgstore: listen on %s: %w", s.channel, err)
	}
	wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("pgstore: wait for notification: %w", err)
		}
		wake()
	}
}
