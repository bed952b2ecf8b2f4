// Package rowcheck holds what the stores share about claimed rows that
// another program wrote: the most attempts a claim counts, and the error of
// a row whose payload is over the relay's limit.
package rowcheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
)

// MaxAttempt is the most attempts a claim counts: the contract's
// retry_count is an INT. A claim never adds to a count that reached
// MaxAttempt - 1 (which would overflow the statement and fail every claim):
// such a row is handed out with attempt MaxAttempt, and comes back malformed
// with [AttemptsUncounted], so that the relay kills it.
const MaxAttempt = math.MaxInt32

// AttemptsUncounted is the problem of a row handed out with MaxAttempt.
var AttemptsUncounted = fmt.Sprintf("retry_count reached %d, the most attempts a claim counts", MaxAttempt)

// PayloadLimit is a claim's payload limit (ClaimParams.MaxPayload) as the
// stores apply it: 0 (none) when it is not positive or not below MaxAttempt,
// which no payload a claim can read reaches anyway.
func PayloadLimit(n int) int {
	if n <= 0 || n >= math.MaxInt32 {
		return 0
	}
	return n
}

// TooLarge is the error of a claimed row whose payload is over the claim's
// limit: the claim read only enough of the payload to tell, and the store
// reads its size on its own.
type TooLarge struct {
	Store string // the store's package, which starts the message
	Row   int64
	Size  int64 // in bytes; negative while unknown
	Limit int
	Also  string // the row's other problems, "" for none
}

func (e *TooLarge) Error() string {
	size := fmt.Sprintf("%d bytes", e.Size)
	if e.Size < 0 {
		size = fmt.Sprintf("more than %d bytes", e.Limit)
	}
	msg := fmt.Sprintf("%s: row %d: payload is %s, over the relay's limit of %d", e.Store, e.Row, size, e.Limit)
	if e.Also != "" {
		msg += "; " + e.Also
	}
	return msg
}

// Len is the length in bytes of a text column scanned into an any (0 for
// anything else), to compare with a payload limit.
func Len(v any) int {
	switch v := v.(type) {
	case []byte:
		return len(v)
	case string:
		return len(v)
	}
	return 0
}

// Queryer is a *sql.DB or *sql.Tx.
type Queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// ReadSizes sets the Size of each [TooLarge] error of bad by running query
// through q: a statement that returns (id, payload size in bytes) for the
// ids it is given, whose "%s" ReadSizes replaces with one placeholder (?)
// per id. Where it cannot read a size, it leaves it unknown.
func ReadSizes(ctx context.Context, q Queryer, query string, bad []outbox.MalformedRow) {
	big := map[int64]*TooLarge{}
	var ids []any
	for _, b := range bad {
		if e, ok := b.Err.(*TooLarge); ok {
			big[e.Row] = e
			ids = append(ids, e.Row)
		}
	}
	if len(ids) == 0 {
		return
	}
	rows, err := q.QueryContext(ctx, fmt.Sprintf(query, strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")), ids...)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, size int64
		if rows.Scan(&id, &size) == nil && big[id] != nil {
			big[id].Size = size
		}
	}
}

// RowError is the error of claimed row m, with RowID and Attempt set, in
// which decoding found err (nil for none); tooLarge says that its payload
// was read over limit, and so only in part. It adds AttemptsUncounted when
// the attempt is MaxAttempt, and names the row; nil for a good row. A row
// too large loses its partial payload.
func RowError(store string, m *outbox.Message, err error, tooLarge bool, limit int) error {
	if m.Attempt >= MaxAttempt {
		err = errors.Join(err, errors.New(AttemptsUncounted))
	}
	switch {
	case tooLarge:
		m.Payload = nil
		also := ""
		if err != nil {
			also = strings.ReplaceAll(err.Error(), "\n", ", ")
		}
		return &TooLarge{Store: store, Row: m.RowID, Size: -1, Limit: limit, Also: also}
	case err != nil:
		return fmt.Errorf("%s: row %d: %w", store, m.RowID, err)
	}
	return nil
}

// Age is a count of microseconds as a Duration, at least 0, and at most the
// longest Duration (about 292 years) where the count is larger: a row
// another program dated year 1 is that old, not a wrapped-around number.
func Age(micros int64) time.Duration {
	if micros > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return max(time.Duration(micros)*time.Microsecond, 0)
}
