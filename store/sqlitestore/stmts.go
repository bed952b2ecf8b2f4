package sqlitestore

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

// maxPrepared bounds the statements a Store keeps prepared. The claim's
// statements are a handful per table; statements whose text changes with
// their arguments (IN lists) run unprepared once the cache is full.
const maxPrepared = 64

// prepareWait bounds how long preparing a statement may wait for a
// connection that another goroutine took in the meantime.
const prepareWait = 10 * time.Millisecond

// prepared holds a Store's prepared statements by text. SQLite parses a
// statement each time it runs one that is not prepared, and the ordered
// claim's statements are long: parsing them cost more CPU than running them
// while messages trickle in (a claim every few milliseconds).
type prepared struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// stmt returns q, prepared on db, or nil when it cannot be (the cache is
// full, or the prepare failed: the caller then runs q as it is, and gets
// the error there).
func (p *prepared) stmt(ctx context.Context, db *sql.DB, q string) *sql.Stmt {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.m[q]; ok {
		return st
	}
	if len(p.m) >= maxPrepared {
		return nil
	}
	// Preparing takes a connection of db's pool. The caller may hold the
	// last one in its transaction (a pool of one connection is common with
	// SQLite): never wait for one; q then runs as it is, and is prepared
	// on a later call.
	if st := db.Stats(); st.MaxOpenConnections > 0 && st.Idle == 0 && st.OpenConnections >= st.MaxOpenConnections {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, prepareWait)
	defer cancel()
	st, err := db.PrepareContext(pctx, q)
	if err != nil {
		return nil
	}
	if p.m == nil {
		p.m = map[string]*sql.Stmt{}
	}
	p.m[q] = st
	return st
}
