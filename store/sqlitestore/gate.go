package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"sync"
	"weak"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLite lets one writer in at a time, and a connection that finds the lock
// taken sleeps in growing steps (up to 100 ms) under busy_timeout. Writers
// that keep coming back can starve a sleeper past its timeout. So the
// Store's own writes (claims, acks, reschedules, kills, migrations) queue in
// Go instead, on one gate per *sql.DB shared by every Store on it: waiters
// are served in turn, without sleeping, and stop waiting when their context
// ends. Other processes and the caller's own transactions still meet the
// Store at SQLite's lock, under busy_timeout, and a write that loses there
// is retried (see retryBusy).

// gate is a FIFO lock that honours contexts.
type gate chan struct{}

func (g gate) enter(ctx context.Context) error {
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g gate) leave() { <-g }

// gates maps each *sql.DB (weakly, so a dropped DB can be collected) to its gate.
var gates sync.Map // weak.Pointer[sql.DB] -> gate

func gateFor(db *sql.DB) gate {
	key := weak.Make(db)
	if g, ok := gates.Load(key); ok {
		return g.(gate)
	}
	g, loaded := gates.LoadOrStore(key, make(gate, 1))
	if !loaded {
		runtime.AddCleanup(db, func(k weak.Pointer[sql.DB]) { gates.Delete(k) }, key)
	}
	return g.(gate)
}

// busyRetries is how many times a write that found the database locked for
// a whole busy_timeout is tried again, while its context lasts.
const busyRetries = 3

// write runs f inside the Store's gate, trying again when SQLite reports the
// database busy (another process or transaction held the lock too long).
func (s *Store) write(ctx context.Context, f func() error) error {
	if err := s.gate.enter(ctx); err != nil {
		return err
	}
	defer s.gate.leave()
	var err error
	for range busyRetries + 1 {
		if err = f(); err == nil || !isBusy(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// Tx runs f in a read-write transaction on the Store's database, and
// commits it when f returns nil (f's error rolls it back and is returned).
// The transaction queues at the gate where the Store's own writes queue
// (claims, acknowledgements, retries), so in one process a service's
// writes and its relay take turns in Go, in order of arrival, instead of
// meeting at SQLite's lock, where a connection that finds it taken sleeps
// in growing steps of up to 100 ms. Write the service's business rows and
// its messages (the Writer, with tx) in f.
//
// When another process holds the database for a whole busy_timeout, the
// transaction is rolled back and f runs again in a new one, up to three
// more times: f must not act outside tx. It must not call the Store's
// other writing methods either, which would wait for the gate f holds.
func (s *Store) Tx(ctx context.Context, f func(tx *sql.Tx) error) error {
	return s.core.InTx(ctx, f) // through s.write, the gate
}
