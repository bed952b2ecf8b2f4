package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// Dialect names the SQL dialect of a store's database. The suite uses it only
// to write placeholders: `$n` for Postgres, `?` for the others.
type Dialect string

// The dialects the suite knows.
const (
	Postgres Dialect = "postgres"
	MySQL    Dialect = "mysql"
	SQLite   Dialect = "sqlite"
)

// Harness is how a store plugs into [Run].
type Harness struct {
	// Dialect of the store's database. Required.
	Dialect Dialect

	// New returns a fixture on a fresh, migrated table unique to t (so that
	// subtests can run in parallel), cleaned up when t ends. Required.
	// The table must have the optional last_error column.
	New func(t *testing.T) *Fixture

	// ContractOnly returns a fixture on a table created by hand with only the
	// columns of the table contract (shared/DESIGN.md), as a team's existing
	// table would be: no headers, topic, partition_key or last_error column.
	// Only id, status, retry_count, created_at and updated_at may be NOT NULL
	// (with their defaults: status 0, retry_count 0, created_at and updated_at
	// now), so that the suite can plant malformed rows with NULLs in the other
	// columns. Optional: when nil, the subtests that need it are skipped.
	ContractOnly func(t *testing.T) *Fixture

	// Chunked returns a fixture like New's whose store runs a batch of more
	// than rows messages as several statements (for stores that chunk
	// their statements). The suite then writes, claims and settles batches
	// that cross statement boundaries. Optional: when nil, that subtest is
	// skipped.
	Chunked func(t *testing.T, rows int) *Fixture

	// InvalidJSON says that the ContractOnly table's payload column accepts
	// text that is not JSON (SQLite TEXT, MySQL LONGTEXT). The suite then
	// plants such a row and expects it back in Claim.Malformed. Default false.
	InvalidJSON bool

	// Runs says that the store's ordered claims return runs: several rows of
	// an aggregate in one claim when nothing holds them back (see
	// outbox.ClaimParams.Ordered). The suite then requires them; without it
	// the suite accepts heads only, and checks of any ordered claim only
	// that it is safe (no row handed out while an earlier row of its
	// aggregate is pending outside the claim). Default false.
	Runs bool

	// Time converts a time into the value bound for a timestamp column in raw
	// SQL (next_retry_at, created_at, updated_at). Default: the time itself.
	Time func(time.Time) any

	// ParseTime converts a timestamp column scanned into an any back into a
	// time; it gets nil for NULL and must return the zero time then. Default:
	// accepts time.Time, and strings or []byte in RFC 3339 or
	// "2006-01-02 15:04:05.999999999" (read as UTC).
	ParseTime func(any) (time.Time, error)
}

// Fixture is one test's store and its table.
type Fixture struct {
	// Store is the store under test, on Table.
	Store outbox.Store
	// Write inserts msgs in one committed transaction through the store's own
	// Writer path (outbox.NewWriter(store).Write, then commit), rolling the
	// transaction back when Write fails.
	Write func(ctx context.Context, msgs ...*outbox.Message) error
	// DB reaches the same database for the suite's raw SQL. The suite does not close it.
	DB *sql.DB
	// Table is the table's name as it can be pasted into SQL on DB (quoted if need be).
	Table string
}

// Run runs the conformance suite against the store h builds. Every subtest
// calls t.Parallel and gets its own table from h.New or h.ContractOnly.
func Run(t *testing.T, h Harness) {
	t.Helper()
	require.NotNil(t, h.New, "storetest: Harness.New is required")
	require.NotEmpty(t, h.Dialect, "storetest: Harness.Dialect is required")
	if h.Time == nil {
		h.Time = func(tm time.Time) any { return tm }
	}
	if h.ParseTime == nil {
		h.ParseTime = defaultParseTime
	}
	s := &suite{h: h}
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"ClaimReturnsDueRowsInIDOrder", s.claimInIDOrder},
		{"ClaimAttemptIsRetryCountPlusOne", s.claimAttempt},
		{"ClaimSetsLease", s.claimSetsLease},
		{"ClaimAfterLeaseExpires", s.claimAfterLeaseExpires},
		{"ClaimSkipsRowsNotDue", s.claimSkipsNotDue},
		{"ClaimRejectsBadLimit", s.claimRejectsBadLimit},
		{"ClaimHonoursContext", s.claimHonoursContext},
		{"AckMarksSent", s.ackMarksSent},
		{"AckFencedByAttempt", s.ackFenced},
		{"AckAfterTakeoverChangesNothing", s.ackAfterTakeover},
		{"AckDelete", s.ackDelete},
		{"RelayTellsDeletedRowsFromFenced", s.goneOrFenced},
		{"EmptyCallsAreNoOps", s.emptyCalls},
		{"Reschedule", s.reschedule},
		{"RescheduleFencedByAttempt", s.rescheduleFenced},
		{"Kill", s.kill},
		{"KillFencedByAttempt", s.killFenced},
		{"LastErrorIsBounded", s.lastErrorIsBounded},
		{"LargeBatchesCrossStatements", s.largeBatches},
		{"Stats", s.stats},
		{"StatsEmpty", s.statsEmpty},
		{"OtherStatusLeftAloneAndCounted", s.otherStatus},
		{"ConcurrentClaimersNeverShareARow", s.concurrentClaimers},
		{"OrderedClaimsAggregateHeads", s.ordered},
		{"OrderedConcurrentKeepsAggregateOrder", s.orderedConcurrent},
		{"OrderedClaimsRuns", s.orderedRuns},
		{"OrderedConcurrentWithStaleSlots", s.orderedStaleSlots},
		{"SlotPreferenceTakesItsSlotFirst", s.slotPreference},
		{"MembershipRanksLiveRelays", s.membership},
		{"RelaysEndToEnd", s.relaysEndToEnd},
		{"WriterRoundTrip", s.writerRoundTrip},
		{"DuplicateMessageIDFails", s.duplicateMessageID},
		{"ContentTypesAndBytesRoundTrip", s.contentRoundTrip},
		{"ContentBytesOverTheLimitAreNotRead", s.contentTooLarge},
		{"ContentMalformedRows", s.contentMalformed},
		{"ContentNeedsMigratedTable", s.contentOnOldTable},
		{"DelayRoundTrip", s.delayRoundTrip},
		{"DelayBecomesDue", s.delayBecomesDue},
		{"DelayedHeadHoldsItsAggregate", s.delayOrderedHead},
		{"ExpiredRowsGoDeadThroughARelay", s.expiryThroughRelay},
		{"DelayNeedsMigratedTable", s.delayOnOldTable},
		{"ClaimsBehindDelayedRows", s.delayedInFront},
		{"MalformedRowsCanBeKilled", s.malformed},
		{"ContractOnlyTable", s.contractOnly},
		{"HostileRowsDoNotStopDelivery", s.hostile},
		{"OversizedPayloadsAreNotRead", s.oversized},
		{"AdminListDead", s.adminListDead},
		{"AdminRetryDead", s.adminRetryDead},
		{"AdminDiscardDead", s.adminDiscardDead},
		{"AdminArchive", s.adminArchive},
		{"AdminArchiveCreatesTableOnlyForARow", s.adminArchiveLazy},
		{"AdminArchiveConcurrentFirstRuns", s.adminArchiveConcurrent},
		{"AdminArchiveFollowsNewColumns", s.adminArchiveFollowsNewColumns},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}

type suite struct {
	h Harness
}

// fx is a fixture with the suite's helpers bound to it.
type fx struct {
	*Fixture
	t *testing.T
	h *Harness
}

func (s *suite) fresh(t *testing.T) *fx {
	t.Helper()
	f := s.h.New(t)
	require.NotNil(t, f, "Harness.New returned nil")
	return &fx{Fixture: f, t: t, h: &s.h}
}

func (s *suite) contract(t *testing.T) *fx {
	t.Helper()
	if s.h.ContractOnly == nil {
		t.Skip("Harness.ContractOnly is nil")
	}
	f := s.h.ContractOnly(t)
	require.NotNil(t, f, "Harness.ContractOnly returned nil")
	return &fx{Fixture: f, t: t, h: &s.h}
}

const hour = time.Hour

// sql rewrites {t} to the table and ? to $n for Postgres.
func (f *fx) sql(q string) string {
	q = strings.ReplaceAll(q, "{t}", f.Table)
	if f.h.Dialect != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (f *fx) exec(q string, args ...any) int64 {
	f.t.Helper()
	res, err := f.DB.ExecContext(f.t.Context(), f.sql(q), args...)
	require.NoError(f.t, err, "exec %s", q)
	n, err := res.RowsAffected()
	require.NoError(f.t, err)
	return n
}

func (f *fx) count(where string, args ...any) int64 {
	f.t.Helper()
	var n int64
	q := "SELECT COUNT(*) FROM {t}"
	if where != "" {
		q += " WHERE " + where
	}
	require.NoError(f.t, f.DB.QueryRowContext(f.t.Context(), f.sql(q), args...).Scan(&n), "count %s", where)
	return n
}

// write writes msgs through the fixture's Writer path and returns their row
// ids in write order.
func (f *fx) write(msgs ...*outbox.Message) []int64 {
	f.t.Helper()
	before := f.maxID()
	require.NoError(f.t, f.Write(f.t.Context(), msgs...))
	rows, err := f.DB.QueryContext(f.t.Context(), f.sql("SELECT id FROM {t} WHERE id > ? ORDER BY id"), before)
	require.NoError(f.t, err)
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(f.t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(f.t, rows.Err())
	require.Len(f.t, ids, len(msgs), "rows written")
	return ids
}

func (f *fx) maxID() int64 {
	f.t.Helper()
	var id sql.NullInt64
	require.NoError(f.t, f.DB.QueryRowContext(f.t.Context(), f.sql("SELECT MAX(id) FROM {t}")).Scan(&id))
	return id.Int64
}

// writeN writes n messages of one aggregate per call and returns their ids.
func (f *fx) writeN(n int) []int64 {
	f.t.Helper()
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = newMsg("order", fmt.Sprintf("agg-%d", i), i)
	}
	return f.write(msgs...)
}

func (f *fx) claim(p outbox.ClaimParams) *outbox.Claim {
	f.t.Helper()
	c, err := f.Store.Claim(f.t.Context(), p)
	require.NoError(f.t, err, "claim")
	require.NotNil(f.t, c, "claim returned a nil *Claim")
	return c
}

func (f *fx) claimN(limit int) *outbox.Claim {
	f.t.Helper()
	return f.claim(outbox.ClaimParams{Limit: limit, Lease: hour})
}

func (f *fx) ack(del bool, msgs ...*outbox.Message) int {
	f.t.Helper()
	n, err := f.Store.Ack(f.t.Context(), outbox.AckParams{Messages: msgs, Delete: del})
	require.NoError(f.t, err, "ack")
	return n
}

func (f *fx) reschedule(refund bool, at time.Time, errText string, msgs ...*outbox.Message) {
	f.t.Helper()
	rs := make([]outbox.Retry, len(msgs))
	for i, m := range msgs {
		rs[i] = outbox.Retry{Message: m, At: at, Err: errText}
	}
	require.NoError(f.t, f.Store.Reschedule(f.t.Context(), outbox.RescheduleParams{Retries: rs, Refund: refund}), "reschedule")
}

func (f *fx) kill(reason string, msgs ...*outbox.Message) {
	f.t.Helper()
	ds := make([]outbox.Dead, len(msgs))
	for i, m := range msgs {
		ds[i] = outbox.Dead{Message: m, Reason: reason}
	}
	require.NoError(f.t, f.Store.Kill(f.t.Context(), outbox.KillParams{Dead: ds}), "kill")
}

// row is what the suite reads back of one row.
type row struct {
	Status      int
	RetryCount  int
	NextRetryAt time.Time // zero when NULL
}

func (f *fx) row(id int64) row {
	f.t.Helper()
	var r row
	var next any
	err := f.DB.QueryRowContext(f.t.Context(),
		f.sql("SELECT status, retry_count, next_retry_at FROM {t} WHERE id = ?"), id).
		Scan(&r.Status, &r.RetryCount, &next)
	require.NoError(f.t, err, "read row %d", id)
	r.NextRetryAt, err = f.h.ParseTime(next)
	require.NoError(f.t, err, "parse next_retry_at %v (%T)", next, next)
	return r
}

func (f *fx) lastError(id int64) sql.NullString {
	f.t.Helper()
	var s sql.NullString
	require.NoError(f.t, f.DB.QueryRowContext(f.t.Context(),
		f.sql("SELECT last_error FROM {t} WHERE id = ?"), id).Scan(&s), "read last_error of %d", id)
	return s
}

// setTime sets a timestamp column of the rows to tm with raw SQL.
func (f *fx) setTime(column string, tm time.Time, ids ...int64) {
	f.t.Helper()
	for _, id := range ids {
		n := f.exec("UPDATE {t} SET "+column+" = ? WHERE id = ?", f.h.Time(tm), id)
		require.EqualValues(f.t, 1, n, "set %s of row %d", column, id)
	}
}

// expire ends the lease of the rows now, as if it had run out.
func (f *fx) expire(ids ...int64) {
	f.t.Helper()
	f.setTime("next_retry_at", time.Now().Add(-time.Minute), ids...)
}

func newMsg(aggType, aggID string, n int) *outbox.Message {
	return &outbox.Message{
		AggregateType: aggType,
		AggregateID:   aggID,
		EventType:     "ORDER_CREATED",
		Payload:       []byte(fmt.Sprintf(`{"n":%d}`, n)),
	}
}

func rowIDs(msgs []*outbox.Message) []int64 {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.RowID
	}
	return ids
}

// byID returns the claimed message with RowID id.
func byID(t *testing.T, c *outbox.Claim, id int64) *outbox.Message {
	t.Helper()
	for _, m := range c.Messages {
		if m.RowID == id {
			return m
		}
	}
	t.Fatalf("row %d not in claim %v", id, rowIDs(c.Messages))
	return nil
}

// withAttempt returns a copy of m with another Attempt, as a relay holding a
// stale (or forged) claim would send it.
func withAttempt(m *outbox.Message, attempt int) *outbox.Message {
	c := *m
	c.Attempt = attempt
	return &c
}

// near asserts that got is within tol of want.
func near(t *testing.T, want, got time.Time, tol time.Duration, what string) {
	t.Helper()
	d := got.Sub(want)
	require.Truef(t, d >= -tol && d <= tol, "%s: got %v, want %v ± %v (off by %v)", what, got, want, tol, d)
}

func defaultParseTime(v any) (time.Time, error) {
	switch v := v.(type) {
	case nil:
		return time.Time{}, nil
	case time.Time:
		return v, nil
	case []byte:
		return parseTimeText(string(v))
	case string:
		return parseTimeText(v)
	}
	return time.Time{}, fmt.Errorf("storetest: cannot read %T as a time; set Harness.ParseTime", v)
}

func parseTimeText(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"} {
		if tm, err := time.Parse(layout, s); err == nil {
			return tm, nil
		}
	}
	return time.Time{}, errors.New("storetest: cannot parse time " + strconv.Quote(s) + "; set Harness.ParseTime")
}
