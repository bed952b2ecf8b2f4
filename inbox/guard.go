package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
)

// ErrNotFound is returned by [StateGuard.Apply] when no row has the key.
var ErrNotFound = errors.New("inbox: row not found")

// ErrUnexpectedState is matched (errors.Is) by every *[StateError].
var ErrUnexpectedState = errors.New("inbox: unexpected state")

// StateError is returned by [StateGuard.Apply] when the row is neither in
// one of the states the transition starts from nor already in its target
// state: say an order that was cancelled when its payment arrives. Whether
// that is a poison message (wrap it in outbox.Permanent) or a race to retry
// is the caller's call.
type StateError struct {
	Key     any
	Current string // the row's state, as text ("" for NULL)
	To      any
	From    []any
}

func (e *StateError) Error() string {
	return fmt.Sprintf("inbox: state of %v is %q: cannot move to %v from %v", e.Key, e.Current, e.To, e.From)
}

// Is reports whether target is ErrUnexpectedState.
func (e *StateError) Is(target error) bool { return target == ErrUnexpectedState }

// Transition is the result of [StateGuard.Apply].
type Transition int

// The results of [StateGuard.Apply].
const (
	// Applied: the row moved to the target state now, in the caller's transaction.
	Applied Transition = iota + 1
	// AlreadyApplied: the row was already in the target state; nothing changed.
	AlreadyApplied
)

// String returns applied, already applied or the number.
func (t Transition) String() string {
	switch t {
	case Applied:
		return "applied"
	case AlreadyApplied:
		return "already applied"
	}
	return fmt.Sprintf("transition(%d)", int(t))
}

// DB is what [StateGuard.Apply] runs its statements on: a *sql.Tx (usually
// the transaction a [Handler] receives), a *sql.Conn or a *sql.DB.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// StateGuard applies business-state transitions only from the expected
// state, the other way (beside an inbox) to make a consumer idempotent: an
// order is marked PAID only while it is PENDING, so a second copy of
// "payment received" finds it PAID and changes nothing. The guard runs
//
//	UPDATE table SET state = to WHERE key = ? AND state IN (from...)
//
// and, when that changed no row, reads the state to tell "already applied"
// from "in some other state" and "no such row". A StateGuard holds only SQL
// text and is safe for concurrent use.
type StateGuard struct {
	dialect Dialect
	table   string
	key     string
	state   string
}

// NewStateGuard returns a guard for table's state column, whose rows are
// found by keyColumn. Names must be plain identifiers (the table may be
// schema-qualified); they are quoted, never formatted from values.
func NewStateGuard(d Dialect, table, keyColumn, stateColumn string) (*StateGuard, error) {
	var errs []error
	if !d.valid() {
		errs = append(errs, fmt.Errorf("unknown dialect %q", d))
	}
	t, err := parseIdent(table, true)
	errs = append(errs, err)
	k, err := parseIdent(keyColumn, false)
	errs = append(errs, err)
	s, err := parseIdent(stateColumn, false)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("inbox: new state guard: %w", err)
	}
	return &StateGuard{dialect: d, table: d.quote(t), key: d.quote(k), state: d.quote(s)}, nil
}

// Apply moves the row whose key column equals key to state to, if its state
// is one of from. It returns Applied when it changed the row (in db, so the
// change commits or rolls back with the caller's transaction) and
// AlreadyApplied when the row was already in state to. It returns
// [ErrNotFound] when no row has the key and a *[StateError] when the row is
// in another state. At least one from state is required and to must not be
// one of them.
//
// Under concurrency the UPDATE decides: of two transactions applying the
// same transition, the second waits for the first's row lock and then finds
// the row already moved.
func (g *StateGuard) Apply(ctx context.Context, db DB, key, to any, from ...any) (Transition, error) {
	if len(from) == 0 {
		return 0, errors.New("inbox: state guard: no from state")
	}
	for _, f := range from {
		if reflect.DeepEqual(f, to) {
			return 0, fmt.Errorf("inbox: state guard: target state %v is also a from state", to)
		}
	}
	d := g.dialect
	upd := "UPDATE " + g.table + " SET " + g.state + " = " + d.ph(1) + " WHERE " + g.key + " = " + d.ph(2) +
		" AND " + g.state + " IN (" + d.phs(3, len(from)) + ")"
	args := append([]any{to, key}, from...)
	res, err := db.ExecContext(ctx, upd, args...)
	if err != nil {
		return 0, fmt.Errorf("inbox: state guard: update: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("inbox: state guard: update: %w", err)
	}
	if n > 0 {
		return Applied, nil
	}
	var current sql.NullString
	var isTarget sql.NullBool
	sel := "SELECT " + g.state + ", " + g.state + " = " + d.ph(1) + " FROM " + g.table + " WHERE " + g.key + " = " + d.ph(2)
	err = db.QueryRowContext(ctx, sel, to, key).Scan(&current, &isTarget)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, ErrNotFound
	case err != nil:
		return 0, fmt.Errorf("inbox: state guard: read state: %w", err)
	case isTarget.Valid && isTarget.Bool:
		return AlreadyApplied, nil
	}
	return 0, &StateError{Key: key, Current: current.String, To: to, From: from}
}
