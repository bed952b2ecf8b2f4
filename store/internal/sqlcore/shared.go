package sqlcore

import (
	"context"
	"database/sql"

	"github.com/outboxkit/outbox"
)

// Admin is embedded in the Store of every store: the methods of the
// dead-letter admin, CountRows and Ping, on the Core the Store built. Their
// godoc is here once; each Store's documentation names what its database
// does differently.
type Admin struct{ c *Core }

// Shared is embedded in the Store of mysqlstore and sqlitestore: Admin's
// methods, and Reschedule and Kill, which they settle alike.
type Shared struct{ Admin }

// Admin returns the admin methods on c, whose Run is then set (SQLRunner
// of c.DB where it was nil). It is called once c is complete.
func (c *Core) Admin() Admin {
	if c.Run == nil {
		c.Run = SQLRunner{DB: c.DB}
	}
	return Admin{c: c}
}

// Shared returns the methods the database/sql stores share, on c. It is
// called once c is complete (its RescheduleSQL and KillSQL set).
func (c *Core) Shared() Shared { return Shared{c.Admin()} }

// Ping checks that the database can be reached.
func (s Admin) Ping(ctx context.Context) error { return s.c.Ping(ctx) }

// CountRows returns how many rows with these ids the table holds, whatever
// their status; part of [outbox.RowCounter].
func (s Admin) CountRows(ctx context.Context, rowIDs []int64) (int, error) {
	return s.c.CountRows(ctx, rowIDs)
}

// Reschedule makes the messages due again at their Retry.At (stored in UTC)
// and records Retry.Err in last_error (when the table has it), fenced like
// Ack: only a row still pending whose retry_count equals the message's
// Attempt changes. With p.Refund the claim's attempt is given back
// (retry_count - 1).
func (s Shared) Reschedule(ctx context.Context, p outbox.RescheduleParams) error {
	return s.c.Reschedule(ctx, p)
}

// Kill marks the messages dead (status 2) and records each Reason in
// last_error (when the table has it), fenced like Ack.
func (s Shared) Kill(ctx context.Context, p outbox.KillParams) error {
	return s.c.Kill(ctx, p)
}

// ListDead returns the dead rows f matches in id order, at most f.Limit
// (default 100, capped at 10,000), without the payloads over f.MaxPayload.
// Rows that cannot be decoded are listed with what could be read. It only
// reads.
func (s Admin) ListDead(ctx context.Context, f outbox.DeadFilter) ([]outbox.DeadMessage, error) {
	return s.c.ListDead(ctx, f)
}

// RetryDead makes the dead rows f matches pending again with a fresh attempt
// count (retry_count 0, next_retry_at NULL; last_error is kept until the
// next attempt) and returns how many it changed. It works in statements of
// 1,000 rows, each its own transaction; f.Limit does not apply.
func (s Admin) RetryDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	return s.c.RetryDead(ctx, f)
}

// DiscardDead deletes the dead rows f matches and returns how many. It works
// in statements of 1,000 rows, each its own transaction; f.Limit does not
// apply.
func (s Admin) DiscardDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	return s.c.DiscardDead(ctx, f)
}

// Options applies opts to cfg, the store's defaults, for its New, which
// panics (a programmer's error) when db is nil.
func Options[C any, O ~func(*C)](store string, db *sql.DB, cfg C, opts []O) C {
	if db == nil {
		panic(store + ": New with a nil *sql.DB")
	}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}
