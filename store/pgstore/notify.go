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
// error when the connection fails, and the relay starts it again. When
// notifications are off, Listen just waits for ctx and returns nil.
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
