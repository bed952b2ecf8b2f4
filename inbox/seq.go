package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrSeqGap is matched (errors.Is) by every *[SeqGapError].
var ErrSeqGap = errors.New("inbox: sequence gap")

// SeqGapError is returned by [Inbox.AdvanceSeq] when a message arrives before
// its predecessor of the same aggregate was applied. Returning it from a
// handler rolls the transaction back, so the message is retried later, when
// the missing one may have arrived.
type SeqGapError struct {
	Aggregate string
	Last      int64 // the last sequence number applied
	Got       int64 // the sequence number of this message
}

func (e *SeqGapError) Error() string {
	return fmt.Sprintf("inbox: sequence gap for %s: got %d, last applied %d", e.Aggregate, e.Got, e.Last)
}

// Is reports whether target is ErrSeqGap.
func (e *SeqGapError) Is(target error) bool { return target == ErrSeqGap }

// AdvanceSeq is the per-aggregate order guard: it applies message seq of an
// aggregate only when it is the next one (last applied + 1; sequences start
// at 1), in tx, the handler's transaction. It returns true when this
// message is the next one (last applied is now seq), false when seq was
// already applied (a stale copy: skip its effect), and a *[SeqGapError] when
// an earlier message is missing. The row of the aggregate stays locked
// until tx ends, so concurrent consumers of one aggregate apply its messages
// one at a time, in order.
//
// Use it inside a [Handler] when the producer numbers each aggregate's
// messages (for example with a per-aggregate counter written in the same
// transaction as the outbox row) and the effect depends on their order.
func (in *Inbox) AdvanceSeq(ctx context.Context, tx *sql.Tx, aggregate string, seq int64) (bool, error) {
	if aggregate == "" || len(aggregate) > MaxMessageIDLength || seq < 1 {
		return false, fmt.Errorf("inbox: advance seq: aggregate %q or seq %d out of range", aggregate, seq)
	}
	c, now := in.cfg.consumer, in.dialect.timeValue(in.cfg.now())
	res, err := tx.ExecContext(ctx, in.q.seqUpdate, seq, now, c, aggregate, seq-1)
	if err != nil {
		return false, fmt.Errorf("inbox: advance seq: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, fmt.Errorf("inbox: advance seq: %w", err)
	} else if n == 1 {
		return true, nil
	}
	if seq == 1 { // the aggregate's first message: no row yet
		res, err := tx.ExecContext(ctx, in.q.seqInsert, c, aggregate, seq, now)
		switch {
		case err != nil && in.dialect.classify(err) != errUnique:
			return false, fmt.Errorf("inbox: advance seq: %w", err)
		case err == nil:
			if n, err := res.RowsAffected(); err != nil {
				return false, fmt.Errorf("inbox: advance seq: %w", err)
			} else if n == 1 {
				return true, nil
			}
		}
	}
	var last int64
	err = tx.QueryRowContext(ctx, in.q.seqRead, c, aggregate).Scan(&last)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		last = 0
	case err != nil:
		return false, fmt.Errorf("inbox: advance seq: %w", err)
	}
	if seq <= last {
		return false, nil
	}
	return false, &SeqGapError{Aggregate: aggregate, Last: last, Got: seq}
}
