package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// DefaultListenCheck is how long [Store.Listen] waits for a notification
	// before it checks its connection (see [WithListenCheck]).
	DefaultListenCheck = 15 * time.Second
	// ListenTimeout bounds each statement of [Store.Listen] (its connect,
	// LISTEN and connection checks) and its goodbye to the database.
	ListenTimeout = 5 * time.Second
)

// errListenTimeout is the cause of a Listen statement that ran out of ListenTimeout.
var errListenTimeout = fmt.Errorf("no answer within %v", ListenTimeout)

// Listen waits for the notifications that writes send when [WithNotify] is
// on, calling wake (which must not block) for each one, and once right after
// it starts listening, since rows may have committed while no one was. It
// holds a connection of its own, opened with the pool's settings and not
// taken from the pool, until ctx is done; then it returns nil. It returns an
// error when the connection fails or stops answering (each statement gets
// ListenTimeout, and the connection is checked after [WithListenCheck]
// without a notification), and the relay starts it again. With
// [WithNotifyTrigger] it first makes sure the table has the trigger, and
// returns an error that says to migrate when it does not (the relay polls
// meanwhile, and tries again). When notifications are off, Listen just waits
// for ctx and returns nil.
func (s *Store) Listen(ctx context.Context, wake func()) error {
	if s.channel == "" {
		<-ctx.Done()
		return nil
	}
	cctx, cancel := listenContext(ctx)
	conn, err := pgx.ConnectConfig(cctx, s.pool.Config().ConnConfig.Copy())
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("pgstore: listen: connect: %w", err)
	}
	defer func() {
		cctx, cancel := listenContext(context.WithoutCancel(ctx))
		defer cancel()
		conn.Close(cctx)
	}()
	if s.cfg.notifyTrigger {
		// Writes leave the NOTIFY to the table's trigger: without it, no one
		// would ever wake the relay, which would only poll.
		var ok bool
		qctx, cancel := listenContext(ctx)
		err := conn.QueryRow(qctx, hasNotifyTrigger, s.ident, notifyTriggerName).Scan(&ok)
		cancel()
		if err != nil {
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
	lctx, cancel := listenContext(ctx)
	_, err = conn.Exec(lctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize())
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("pgstore: listen on %s: %w", s.channel, err)
	}
	wake()
	for {
		wctx, cancel := context.WithTimeoutCause(ctx, s.cfg.listenCheck, errListenCheck)
		_, err := conn.WaitForNotification(wctx)
		quiet := errors.Is(context.Cause(wctx), errListenCheck)
		cancel()
		switch {
		case err == nil:
			wake()
			continue
		case ctx.Err() != nil:
			return nil
		case !quiet:
			return fmt.Errorf("pgstore: wait for notification: %w", err)
		}
		// No notification for a while: make sure the connection still answers.
		pctx, cancel := listenContext(ctx)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("pgstore: listen: the connection stopped answering: %w", err)
		}
	}
}

// errListenCheck is the cause of a wait for notifications that ended so that
// Listen checks its connection.
var errListenCheck = errors.New("time to check the connection")

// listenContext bounds one statement of Listen by ListenTimeout.
func listenContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, ListenTimeout, errListenTimeout)
}
