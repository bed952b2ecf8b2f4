package storetest

import (
	"database/sql"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
)

// Hostile rows: values that a writer in another language can put in the
// contract's columns, planted by plain SQL next to rows the Writer wrote. A
// relay drains the table; each planted row must be delivered, wait, be left
// alone, or go dead with a reason that names it, and the good rows around it
// must be delivered whatever it holds.

// tableKind is the table a hostile row is planted in.
type tableKind int

const (
	migrated tableKind = iota // Harness.New: the store's own table, with last_error
	contract                  // Harness.ContractOnly: the contract's columns, strings nullable
	loose                     // the contract's columns with looser types: see looseDDL
)

func (k tableKind) String() string { return [...]string{"Migrated", "ContractOnly", "Loose"}[k] }

// lit is raw SQL for a value that no parameter can carry (a dialect's
// special timestamp), pasted into the INSERT as is.
type lit string

// outcome is what must become of a hostile row.
type outcome int

const (
	delivered outcome = iota // published and acknowledged
	killed                   // dead, with a reason
	waiting                  // still pending, never claimed (not due)
	untouched                // left alone: its status is none the relay knows
)

type hostileRow struct {
	name     string
	dialects []Dialect // nil: every dialect
	tables   []tableKind
	vals     map[string]any // column -> value (nil: NULL; time.Time through Harness.Time; lit: raw SQL)
	want     outcome
	reason   string // killed: in the error and last_error, with "row <id>"
	attempt  int    // delivered: the attempt that succeeded, 0 for 1
}

var (
	year1    = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	year9999 = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	all      = []tableKind{migrated, contract, loose}
)

// hostileRows are the cases. A value that only one table type can hold is
// planted only in that table (a NULL retry_count in the loose table, whose
// column allows it).
func hostileRows() []hostileRow {
	return slices.Concat(hostileCounts(), hostileTimes(), hostileMessages())
}

// hostileCounts are the cases of retry_count and status.
func hostileCounts() []hostileRow {
	return []hostileRow{
		// retry_count: the claim counts the attempt in SQL, so a count at the
		// column's limit must not overflow the statement (and fail every claim).
		{name: "RetryCountIntMax", tables: all, vals: map[string]any{"retry_count": int64(2147483647)},
			want: killed, reason: "retry_count"},
		{name: "RetryCountBelowIntMax", tables: all, vals: map[string]any{"retry_count": int64(2147483646)},
			want: killed, reason: "retry_count"},
		{name: "RetryCountNegative", tables: all, vals: map[string]any{"retry_count": int64(-3)}, want: delivered},
		{name: "RetryCountIntMin", tables: all, vals: map[string]any{"retry_count": int64(-2147483648)}, want: delivered},
		{name: "RetryCountNull", tables: []tableKind{loose}, vals: map[string]any{"retry_count": nil}, want: delivered},
		{name: "RetryCountBeyondInt", tables: []tableKind{loose}, vals: map[string]any{"retry_count": int64(5_000_000_000)},
			want: killed, reason: "retry_count"},
		{name: "RetryCountInt64Max", tables: []tableKind{loose}, vals: map[string]any{"retry_count": int64(9223372036854775807)},
			want: killed, reason: "retry_count"},
		{name: "RetryCountInt64Min", tables: []tableKind{loose}, vals: map[string]any{"retry_count": int64(-9223372036854775808)},
			want: delivered},
		{name: "RetryCountText", dialects: []Dialect{SQLite}, tables: all, vals: map[string]any{"retry_count": "many"},
			want: delivered},
		{name: "RetryCountReal", dialects: []Dialect{SQLite}, tables: all, vals: map[string]any{"retry_count": 2.5},
			want: delivered, attempt: 3},
		{name: "RetryCountRealHuge", dialects: []Dialect{SQLite}, tables: all, vals: map[string]any{"retry_count": 1e300},
			want: killed, reason: "retry_count"},

		// status: only 0 is claimed; anything else is another program's business.
		{name: "StatusNull", tables: []tableKind{loose}, vals: map[string]any{"status": nil}, want: untouched},
		{name: "StatusSeven", tables: all, vals: map[string]any{"status": 7}, want: untouched},
		{name: "StatusNegative", tables: all, vals: map[string]any{"status": -1}, want: untouched},
	}
}

// hostileTimes are the cases of times far in the past or future, and the
// databases' special ones.
func hostileTimes() []hostileRow {
	return []hostileRow{
		{name: "NextRetryAtYear1", tables: all, vals: map[string]any{"next_retry_at": year1}, want: delivered},
		{name: "NextRetryAtYear9999", tables: all, vals: map[string]any{"next_retry_at": year9999}, want: waiting},
		{name: "CreatedAtYear1", tables: all, vals: map[string]any{"created_at": year1}, want: delivered},
		{name: "CreatedAtYear9999", tables: all, vals: map[string]any{"created_at": year9999}, want: delivered},
		{name: "CreatedAtNull", tables: []tableKind{loose}, vals: map[string]any{"created_at": nil}, want: delivered},
		{name: "NextRetryAtInfinity", dialects: []Dialect{Postgres}, tables: all,
			vals: map[string]any{"next_retry_at": lit("'infinity'")}, want: waiting},
		{name: "NextRetryAtMinusInfinity", dialects: []Dialect{Postgres}, tables: all,
			vals: map[string]any{"next_retry_at": lit("'-infinity'")}, want: delivered},
		{name: "CreatedAtInfinity", dialects: []Dialect{Postgres}, tables: all,
			vals: map[string]any{"created_at": lit("'infinity'")}, want: delivered},
		{name: "CreatedAtMinusInfinity", dialects: []Dialect{Postgres}, tables: all,
			vals: map[string]any{"created_at": lit("'-infinity'")}, want: delivered},
		{name: "NextRetryAtZeroDate", dialects: []Dialect{MySQL}, tables: all,
			vals: map[string]any{"next_retry_at": lit("'0000-00-00 00:00:00'")}, want: delivered},
		{name: "CreatedAtZeroDate", dialects: []Dialect{MySQL}, tables: all,
			vals: map[string]any{"created_at": lit("'0000-00-00 00:00:00'")}, want: delivered},
		{name: "NextRetryAtGarbage", dialects: []Dialect{SQLite}, tables: all,
			vals: map[string]any{"next_retry_at": "tomorrow"}, want: delivered},
		{name: "CreatedAtGarbage", dialects: []Dialect{SQLite}, tables: all,
			vals: map[string]any{"created_at": "long ago"}, want: delivered},
	}
}

// hostileMessages are the cases of the message's own columns.
func hostileMessages() []hostileRow {
	return []hostileRow{
		{name: "MessageIDNull", tables: []tableKind{contract, loose}, vals: map[string]any{"message_id": nil},
			want: killed, reason: "message_id is NULL"},
		{name: "MessageIDEmpty", tables: all, vals: map[string]any{"message_id": ""},
			want: killed, reason: "message_id is empty"},
		{name: "AggregateIDNull", tables: []tableKind{contract, loose}, vals: map[string]any{"aggregate_id": nil},
			want: killed, reason: "aggregate_id is NULL"},
		{name: "EventTypeEmpty", tables: all, vals: map[string]any{"event_type": ""},
			want: killed, reason: "event_type is empty"},
		{name: "LongText", tables: []tableKind{loose}, vals: map[string]any{
			"message_id": strings.Repeat("m", 1000), "aggregate_id": strings.Repeat("a", 1000),
			"event_type": strings.Repeat("E", 300)}, want: delivered},
		{name: "AggregateIDNotUTF8", dialects: []Dialect{SQLite}, tables: all,
			vals: map[string]any{"aggregate_id": []byte{0xff, 0xfe}}, want: killed, reason: "aggregate_id is not valid UTF-8"},
		{name: "PayloadNull", tables: []tableKind{contract, loose}, vals: map[string]any{"payload": nil},
			want: killed, reason: "payload is NULL"},
		{name: "PayloadJSONNull", tables: all, vals: map[string]any{"payload": "null"}, want: delivered},
		{name: "PayloadEmpty", tables: []tableKind{loose}, vals: map[string]any{"payload": ""},
			want: killed, reason: "payload"},
		{name: "PayloadNotJSON", tables: []tableKind{loose}, vals: map[string]any{"payload": "{oops"},
			want: killed, reason: "payload is not valid JSON"},
		{name: "HeadersArray", tables: []tableKind{migrated}, vals: map[string]any{"headers": `[1, 2]`},
			want: killed, reason: "headers"},
		{name: "HeadersString", tables: []tableKind{migrated}, vals: map[string]any{"headers": `"x"`},
			want: killed, reason: "headers"},
		{name: "HeadersNumberValue", tables: []tableKind{migrated}, vals: map[string]any{"headers": `{"a": 1}`},
			want: killed, reason: "headers"},
		{name: "HeadersJSONNull", tables: []tableKind{migrated}, vals: map[string]any{"headers": `null`},
			want: delivered},
	}
}

// RunHostileRows runs only the subtests of [Run] that plant hostile rows
// (values a writer in another language can put in the contract's columns:
// counts at an integer's limit, NULLs, times far in the past or future,
// headers that are not an object, payloads far over the relay's limit)
// next to good rows and drain the table with a relay. A store with several
// ways of claiming runs it for the ways [Run] does not cover. Only
// h.Dialect, h.New, h.ContractOnly and h.Time are used.
func RunHostileRows(t *testing.T, h Harness) {
	t.Helper()
	if h.Time == nil {
		h.Time = func(tm time.Time) any { return tm }
	}
	s := &suite{h: h}
	t.Run("HostileRowsDoNotStopDelivery", func(t *testing.T) {
		t.Parallel()
		s.hostile(t)
	})
	t.Run("OversizedPayloadsAreNotRead", func(t *testing.T) {
		t.Parallel()
		s.oversized(t)
	})
}

// hostile runs the cases on each kind of table, with unordered and with
// ordered claims.
func (s *suite) hostile(t *testing.T) {
	for _, kind := range all {
		for _, ordered := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/Ordered=%v", kind, ordered), func(t *testing.T) {
				t.Parallel()
				var f *fx
				switch kind {
				case migrated:
					f = s.fresh(t)
				case contract:
					f = s.contract(t)
				case loose:
					f = s.loose(t)
				}
				s.checkHostile(t, f, kind, ordered)
			})
		}
	}
}

// plantedRow is a hostile row in the table.
type plantedRow struct {
	hostileRow
	id int64
}

func (s *suite) checkHostile(t *testing.T, f *fx, kind tableKind, ordered bool) {
	good, planted := s.plantHostile(f, kind)

	// Stats reads every pending row's created_at: year 1, infinities, zero
	// dates must neither fail it nor wrap its age around.
	st, err := f.Store.Stats(t.Context())
	require.NoError(t, err, "stats with the hostile rows pending")
	require.GreaterOrEqual(t, st.OldestPending, 200*365*24*time.Hour, "a row of year 1 is pending")

	pub := outboxtest.NewPublisher()
	rec := &eventRecorder{byRow: map[int64]outbox.MessageEvent{}}
	r, err := outbox.NewRelay(f.Store, pub, outbox.WithBatchSize(7), outbox.WithHooks(rec),
		outbox.WithOrdering(ordered, outbox.DeadSkips))
	require.NoError(t, err)
	for range 100 {
		ev, err := r.Step(t.Context())
		require.NoError(t, err, "a hostile row must not fail the claim")
		if ev.Claimed == 0 {
			break
		}
	}

	for _, id := range good {
		require.Equal(t, outbox.ResultSent, rec.byRow[id].Result, "good row %d delivered", id)
		require.EqualValues(t, 1, f.status(id).Int64, "good row %d sent", id)
	}
	for _, p := range planted {
		ev, seen := rec.byRow[p.id]
		checkPlanted(t, f, kind, p, ev, seen)
	}
}

// plantHostile writes, with raw SQL, the hostile rows for tables of kind on
// this dialect, each between two good rows, and returns the good rows' ids
// and the planted rows.
func (s *suite) plantHostile(f *fx, kind tableKind) ([]int64, []plantedRow) {
	good := f.write(newMsg("order", "good", 1))
	var planted []plantedRow
	for _, c := range hostileRows() {
		if !slices.Contains(c.tables, kind) || (c.dialects != nil && !slices.Contains(c.dialects, s.h.Dialect)) {
			continue
		}
		vals := map[string]any{
			"message_id": "hostile-" + c.name, "aggregate_type": "hostile", "aggregate_id": c.name,
			"event_type": "E", "payload": `{"n":1}`,
		}
		maps.Copy(vals, c.vals)
		cols := slices.Sorted(maps.Keys(vals))
		exprs := make([]string, len(cols))
		var args []any
		for i, col := range cols {
			switch v := vals[col].(type) {
			case lit:
				exprs[i] = string(v)
			case time.Time:
				exprs[i], args = "?", append(args, s.h.Time(v))
			default:
				exprs[i], args = "?", append(args, v)
			}
		}
		f.exec("INSERT INTO {t} ("+strings.Join(cols, ", ")+") VALUES ("+strings.Join(exprs, ", ")+")", args...)
		planted = append(planted, plantedRow{hostileRow: c, id: f.maxID()})
		good = append(good, f.write(newMsg("order", "good", len(good)+1))...)
	}
	return good, planted
}

// checkPlanted checks what became of planted row p: the relay's event for
// it (ev, when seen) and its status.
func checkPlanted(t *testing.T, f *fx, kind tableKind, p plantedRow, ev outbox.MessageEvent, seen bool) {
	t.Helper()
	st := f.status(p.id)
	switch p.want {
	case delivered:
		require.Equal(t, outbox.ResultSent, ev.Result, "%s: delivered (%v)", p.name, ev.Err)
		require.Equal(t, max(p.attempt, 1), ev.Message.Attempt, "%s: attempt", p.name)
		require.EqualValues(t, 1, st.Int64, "%s: sent", p.name)
	case killed:
		require.Equal(t, outbox.ResultDead, ev.Result, "%s: killed", p.name)
		require.ErrorContains(t, ev.Err, p.reason, p.name)
		require.ErrorContains(t, ev.Err, fmt.Sprintf("row %d", p.id), "%s: the reason names the row", p.name)
		require.EqualValues(t, 2, st.Int64, "%s: dead", p.name)
		if kind == migrated {
			require.Contains(t, f.lastError(p.id).String, p.reason, "%s: last_error", p.name)
		}
	case waiting:
		require.False(t, seen, "%s: never claimed", p.name)
		require.EqualValues(t, 0, st.Int64, "%s: still pending", p.name)
	case untouched:
		require.False(t, seen, "%s: never claimed", p.name)
		require.Equal(t, p.vals["status"] != nil, st.Valid, "%s: status kept", p.name)
		if st.Valid {
			require.EqualValues(t, p.vals["status"], st.Int64, "%s: status kept", p.name)
		}
	}
}

// status reads a row's status, which may be NULL.
func (f *fx) status(id int64) sql.NullInt64 {
	f.t.Helper()
	var st sql.NullInt64
	require.NoError(f.t, f.DB.QueryRowContext(f.t.Context(), f.sql("SELECT status FROM {t} WHERE id = ?"), id).Scan(&st))
	return st
}

// eventRecorder keeps the last event of each row, by row id.
type eventRecorder struct {
	byRow map[int64]outbox.MessageEvent
}

// OnMessage implements outbox.HookMessage; the relay calls it under its own lock.
func (r *eventRecorder) OnMessage(ev outbox.MessageEvent) { r.byRow[ev.Message.RowID] = ev }

// looseDDL is, by dialect, a table made by hand with only the contract's
// columns and looser types than the contract's: text for the strings and the
// payload, a 64-bit retry_count, timestamps without a time zone, and every
// column but id nullable (with the defaults a writer leaves to the table).
var looseDDL = map[Dialect]string{
	Postgres: `CREATE TABLE {t} (
	id bigserial PRIMARY KEY,
	message_id text, aggregate_type text, aggregate_id text, event_type text, payload text,
	status integer DEFAULT 0, retry_count bigint DEFAULT 0,
	next_retry_at timestamp, created_at timestamp DEFAULT now(), updated_at timestamp DEFAULT now())`,
	MySQL: `CREATE TABLE {t} (
	id BIGINT AUTO_INCREMENT PRIMARY KEY,
	message_id TEXT, aggregate_type TEXT, aggregate_id TEXT, event_type TEXT, payload LONGTEXT,
	status INT NULL DEFAULT 0, retry_count BIGINT NULL DEFAULT 0,
	next_retry_at DATETIME NULL, created_at DATETIME NULL DEFAULT CURRENT_TIMESTAMP,
	updated_at DATETIME NULL DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	SQLite: `CREATE TABLE {t} (
	id INTEGER PRIMARY KEY,
	message_id, aggregate_type, aggregate_id, event_type, payload,
	status DEFAULT 0, retry_count DEFAULT 0,
	next_retry_at, created_at DEFAULT CURRENT_TIMESTAMP, updated_at DEFAULT CURRENT_TIMESTAMP)`,
}

// loose returns a ContractOnly fixture whose table, not used yet, is made
// again with looseDDL.
func (s *suite) loose(t *testing.T) *fx {
	t.Helper()
	f := s.contract(t)
	f.exec("DROP TABLE {t}")
	f.exec(looseDDL[s.h.Dialect])
	return f
}

// oversizedOne runs the oversized subtests of the stores tested in one
// process one at a time.
var oversizedOne sync.Mutex

// oversized plants rows whose payloads are far over the relay's payload
// limit between good rows, and has a relay with a limit of 1 KiB drain the
// table: the big rows must go dead with their size in the reason, the good
// ones be delivered, and the claim must not read the big payloads: the
// relay must allocate less than their total size. A claim that read them
// copies each at least once (without the limit in the claim, the relay
// allocates two to four times their size); with the limit, tens of KiB.
// The process's other tests allocate meanwhile, several MiB at times on a
// loaded machine, which the bound leaves room for.
func (s *suite) oversized(t *testing.T) {
	// What the process allocates is measured: one such test at a time, so
	// that another one's inserts of big payloads do not count.
	oversizedOne.Lock()
	defer oversizedOne.Unlock()
	f := s.fresh(t)
	const (
		rows  = 4
		size  = 4 << 20 // bytes of each big payload, a JSON string
		limit = 1 << 10
	)
	big := `"` + strings.Repeat("a", size-2) + `"`
	var good, huge []int64
	for i := range rows {
		good = append(good, f.write(newMsg("order", "good", i))...)
		f.exec("INSERT INTO {t} (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, ?, ?)",
			fmt.Sprintf("big-%d", i), "order", "big", "E", big)
		huge = append(huge, f.maxID())
	}
	big = ""

	pub := outboxtest.NewPublisher()
	// Reading past megabytes of payload to take their size is slow on a
	// loaded machine under the race detector (SQLite reads each big value's
	// overflow pages): the store timeout is not what this test is about.
	r, err := outbox.NewRelay(f.Store, pub, outbox.WithOrdering(false, outbox.DeadBlocks), outbox.WithBatchSize(100), outbox.WithMaxPayloadSize(limit),
		outbox.WithStoreTimeout(2*time.Minute))
	require.NoError(t, err)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ev, err := r.Step(t.Context())
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	require.Equal(t, 2*rows, ev.Claimed)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("relay step allocated %d KiB", allocated>>10)
	require.Less(t, allocated, uint64(rows*size),
		"the relay allocated %d MiB for %d payloads of %d MiB over its limit: the claim read them", allocated>>20, rows, size>>20)

	require.Equal(t, rows, pub.Count(), "the good rows are delivered")
	for _, id := range good {
		require.EqualValues(t, 1, f.status(id).Int64, "good row %d sent", id)
	}
	for _, id := range huge {
		require.EqualValues(t, 2, f.status(id).Int64, "big row %d dead", id)
		require.Contains(t, f.lastError(id).String,
			fmt.Sprintf("row %d: payload is %d bytes, over the relay's limit of %d", id, size, limit))
	}

	// Listing them (outbox dead list, retry, discard) reads their sizes only.
	if admin, ok := f.Store.(outbox.Admin); ok {
		listOversized(t, admin, huge, size, limit)
	}
}

// listOversized checks that ListDead returns the dead rows huge, whose
// payloads are size bytes, with their sizes and without reading the
// payloads over limit.
func listOversized(t *testing.T, admin outbox.Admin, huge []int64, size, limit int) {
	rows := len(huge)
	var before, after runtime.MemStats
	// ListDead only reads, so it is measured up to ten times, a fifth of a
	// second apart, and the least taken: the process's other tests allocate
	// meanwhile (on a loaded two-core machine, over 9 MiB during each of
	// three calls in a row), but a ListDead that read the payloads would be
	// over the bound every time.
	var dead []outbox.DeadMessage
	var err error
	allocated := uint64(math.MaxUint64)
	for try := range 10 {
		if try > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		runtime.ReadMemStats(&before)
		dead, err = admin.ListDead(t.Context(), outbox.DeadFilter{MaxPayload: limit})
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		allocated = min(allocated, after.TotalAlloc-before.TotalAlloc)
		if allocated < uint64(rows*size) {
			break
		}
	}
	t.Logf("ListDead allocated %d KiB", allocated>>10)
	require.Less(t, allocated, uint64(rows*size),
		"ListDead allocated %d MiB for %d payloads of %d MiB over its limit", allocated>>20, rows, size>>20)
	require.Len(t, dead, rows)
	for i, d := range dead {
		require.Equal(t, huge[i], d.Message.RowID)
		require.Nil(t, d.Message.Payload, "row %d: payload not read", huge[i])
		require.EqualValues(t, size, d.PayloadSize, "row %d", huge[i])
	}
	small, err := admin.ListDead(t.Context(), outbox.DeadFilter{RowIDs: huge[:1], MaxPayload: size})
	require.NoError(t, err)
	require.Len(t, small, 1)
	require.Len(t, small[0].Message.Payload, size, "a payload within the limit is read")
	require.EqualValues(t, size, small[0].PayloadSize)
}
