package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/rowcheck"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// Claim takes up to p.Limit due pending rows that no other relay holds, in id
// order, counts the attempt and leases them until the database's now() +
// p.Lease, in one statement. With p.Ordered it takes only rows that have no
// earlier pending row (or dead row, with p.BlockOnDead) of the same
// aggregate_type and aggregate_id. Rows with a NULL or empty required
// column, text that is not valid UTF-8, a payload that is not JSON,
// headers that are not a JSON object of strings, or a retry_count that
// reached the most attempts an integer counts (2147483647) come back in
// Claim.Malformed. A NULL or negative retry_count counts as 0.
//
// With p.MaxPayload, a claim reads no more than about that much of each
// payload: a row whose payload is larger comes back in Claim.Malformed
// with the payload's size, which is read on its own, without the payload.
//
// An ordered claim with p.Slots above 1 looks first at the rows of the
// aggregates whose hash (hashtextextended of aggregate_type || '/' ||
// aggregate_id, made non-negative) modulo p.Slots is p.Slot (runs.go); what
// it keeps is decided as without it.
func (s *Store) Claim(ctx context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	c, err := s.claim(ctx, p)
	if c != nil {
		c.ValidJSON = true // message() checked every payload, or the column type did
		run := s.poolRow
		if h, ok := c.Held.(*heldClaim); ok { // the pool may have no connection to spare
			run = func(ctx context.Context, sql string, args ...any) scanner { return h.conn.QueryRow(ctx, sql, args...) }
		}
		s.readPayloadSizes(ctx, run, c)
	}
	return c, err
}

// readPayloadSizes reads the size of each payload that made a row of c
// malformed for being over the claim's limit, without reading the payloads.
// If it cannot, the rows say "more than" the limit.
func (s *Store) readPayloadSizes(ctx context.Context, run rowQuerier, c *outbox.Claim) {
	big := map[int64]*rowcheck.TooLarge{}
	var ids []int64
	for _, bad := range c.Malformed {
		if e, ok := bad.Err.(*rowcheck.TooLarge); ok {
			big[e.Row] = e
			ids = append(ids, e.Row)
		}
	}
	if len(ids) == 0 {
		return
	}
	size := "octet_length(o.payload::text)"
	if q, err := s.queriesFor(ctx, run); err == nil { // built by the claim
		size = q.payloadSize()
	}
	var got, sizes []int64
	err := run(ctx, s.m.SQL(fmt.Sprintf(`SELECT COALESCE(array_agg(o.id), '{}'), COALESCE(array_agg((%s)::bigint), '{}')
FROM %s AS o WHERE o.id = ANY($1::bigint[])`, size, s.ident)), ids).Scan(&got, &sizes)
	if err != nil {
		return
	}
	for i, id := range got {
		big[id].Size = sizes[i]
	}
}

// claimer is one way to claim (row leases, batch leases, held claims),
// chosen once by New from the options. claim takes rows for p, which
// Store.claim has checked, with q, the table's statements (buildQueries
// built the ones of the way chosen, and Ack, Reschedule and Kill run its
// settling statements). It returns the claim sorted by id, with
// Claim.Held set when the rows stay locked until Claim.Held.Settle.
type claimer interface {
	claim(ctx context.Context, q *queries, p outbox.ClaimParams) (*outbox.Claim, error)
}

func (s *Store) claim(ctx context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	if err := dialect.CheckClaim(p); err != nil {
		return nil, err
	}
	if p.Slots > 1 && (p.Slot < 0 || p.Slot >= p.Slots) {
		return nil, fmt.Errorf("pgstore: claim: slot %d is not between 0 and %d", p.Slot, p.Slots-1)
	}
	q, err := s.queriesFor(ctx, s.poolRow)
	if err != nil {
		return nil, err
	}
	return s.claimer.claim(ctx, q, p)
}

// fromCursor claims up to limit rows with take, each call of which claims
// (and commits) the due rows with ids in (lo, hi]: first from the claim
// cursor cur on; when that comes back short, the rest from the first due row up
// to the cursor. If that second take fails, the rows of the first stand and
// go out without what the failed one returned.
func (s *Store) fromCursor(cur *claimCursor, limit int, take func(limit int, lo, hi int64) (*outbox.Claim, error)) (*outbox.Claim, error) {
	after := cur.start(time.Now())
	claim, err := take(limit, after, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	if n := claimSize(claim); after > 0 && n < limit {
		if more, err := take(limit-n, 0, after); err == nil {
			claim.Messages = append(claim.Messages, more.Messages...)
			claim.Malformed = append(claim.Malformed, more.Malformed...)
		}
	}
	cur.claimed(after, claim, limit)
	sortClaim(claim)
	return claim, nil
}

// cursorFor returns the claim cursor of claims with p: the Store's, or,
// with a slot preference, one per slot. A claim of slot rows reaches ids
// about Slots times further than one of any rows; a relay of another slot
// sharing the Store (several relays in one process) would start after them,
// past the first rows of its own slot.
func (s *Store) cursorFor(p outbox.ClaimParams) *claimCursor {
	if p.Slots < 2 {
		return &s.claimCursor
	}
	key := [2]int{p.Slot, p.Slots}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.slotCursors[key]
	if c == nil {
		if s.slotCursors == nil {
			s.slotCursors = map[[2]int]*claimCursor{}
		}
		c = &claimCursor{every: s.claimCursor.every}
		s.slotCursors[key] = c
	}
	return c
}

// claimedRow holds one row of a claim as scanned, NULLs included.
type claimedRow struct {
	id                                            int64
	attempt                                       int32
	messageID, aggType, aggID, eventType, payload pgtype.Text
	createdAt                                     pgtype.Timestamptz
	createdAtText                                 pgtype.Text // instead, when the column is text
	headers, topic, partitionKey, contentType     pgtype.Text
	payloadBytes                                  []byte // NULL: nil
	deliverAt, expiresAt                          pgtype.Timestamptz

	// What the database already guarantees, so that message need not check
	// it again: the payload column is json or jsonb (valid JSON), the
	// server encoding is UTF8 (valid UTF-8 text).
	validJSON, validUTF8 bool
	// maxPayload is the claim's payload limit, 0 for none: a longer payload
	// was read only in part (payloadColumn).
	maxPayload int32
}

func (r *claimedRow) dest(q *queries, maxPayload int32) []any {
	r.validJSON, r.validUTF8, r.maxPayload = q.payloadJSON, q.utf8, maxPayload
	d := []any{&r.id, &r.attempt, &r.messageID, &r.aggType, &r.aggID, &r.eventType, &r.payload, &r.createdAt}
	if q.createdAtText {
		d[7] = &r.createdAtText
	}
	if q.Headers {
		d = append(d, &r.headers)
	}
	if q.Topic {
		d = append(d, &r.topic)
	}
	if q.PartitionKey {
		d = append(d, &r.partitionKey)
	}
	if q.ContentType {
		d = append(d, &r.contentType)
	}
	if q.PayloadBytes {
		d = append(d, &r.payloadBytes)
	}
	if q.DeliverAt {
		d = append(d, &r.deliverAt)
	}
	if q.ExpiresAt {
		d = append(d, &r.expiresAt)
	}
	return d
}

// message decodes the row. On error the message still carries RowID,
// Attempt and whatever could be read.
func (r *claimedRow) message() (*outbox.Message, error) {
	m := &outbox.Message{
		RowID:         r.id,
		Attempt:       int(r.attempt),
		MessageID:     r.messageID.String,
		AggregateType: r.aggType.String,
		AggregateID:   r.aggID.String,
		EventType:     r.eventType.String,
		Topic:         r.topic.String,
		PartitionKey:  r.partitionKey.String,
		CreatedAt:     r.createdAt.Time,
		DeliverAt:     finiteTime(r.deliverAt),
		ExpiresAt:     finiteTime(r.expiresAt),
	}
	if r.createdAtText.Valid {
		m.CreatedAt = parseCreatedAt(r.createdAtText.String)
	}
	var bad []string
	if r.contentType.Valid {
		ct, err := sqlcore.ContentType(r.contentType.String)
		if err != nil {
			bad = append(bad, err.Error())
		}
		m.ContentType = ct
	}
	tooLarge := r.tooLarge()
	bad = append(bad, r.textProblems(tooLarge)...)
	if !tooLarge {
		bad = append(bad, r.decodePayload(m)...)
	}
	if r.headers.Valid && r.headers.String != "" { // "" in a text column: no headers
		if err := decodeHeaders(r.headers.String, &m.Headers); err != nil {
			bad = append(bad, "headers are not a JSON object of strings: "+err.Error())
		}
	}
	if r.attempt >= rowcheck.MaxAttempt {
		bad = append(bad, rowcheck.AttemptsUncounted)
	}
	if tooLarge {
		return m, &rowcheck.TooLarge{Store: "pgstore", Row: r.id, Size: -1, Limit: int(r.maxPayload), Also: strings.Join(bad, ", ")}
	}
	if len(bad) > 0 {
		return m, fmt.Errorf("pgstore: row %d: %s", r.id, strings.Join(bad, ", "))
	}
	return m, nil
}

// tooLarge reports whether the payload is over the read limit, so that it
// was read only in part and there is nothing to check in it.
// payload_bytes, when set, is the payload (payload then holds JSON null).
func (r *claimedRow) tooLarge() bool {
	if r.maxPayload <= 0 {
		return false
	}
	if r.payloadBytes != nil {
		return len(r.payloadBytes) > int(r.maxPayload)
	}
	return r.payload.Valid && len(r.payload.String) > int(r.maxPayload)
}

// textProblems checks the text columns. A UTF8 database returns only valid
// UTF-8, but a SQL_ASCII one returns the bytes as stored, and a team's own
// table may keep payload and headers as text: check what jsonb and the
// encoding would guarantee.
func (r *claimedRow) textProblems(tooLarge bool) []string {
	payload := r.payload
	if tooLarge || r.payloadBytes != nil {
		payload = pgtype.Text{String: "{}", Valid: true}
	}
	var bad []string
	for _, c := range []struct {
		name     string
		v        pgtype.Text
		required bool
	}{
		{"message_id", r.messageID, true}, {"aggregate_type", r.aggType, true}, {"aggregate_id", r.aggID, true},
		{"event_type", r.eventType, true}, {"payload", payload, true},
		{"headers", r.headers, false}, {"topic", r.topic, false}, {"partition_key", r.partitionKey, false},
	} {
		switch {
		case !c.v.Valid:
			if c.required {
				bad = append(bad, c.name+" is NULL")
			}
		case c.required && c.v.String == "":
			bad = append(bad, c.name+" is empty")
		case !r.validUTF8 && !utf8.ValidString(c.v.String):
			bad = append(bad, c.name+" is not valid UTF-8")
		}
	}
	return bad
}

// decodePayload sets m.Payload from payload_bytes or payload, and returns
// what is wrong with it under m's content type.
func (r *claimedRow) decodePayload(m *outbox.Message) []string {
	switch {
	case r.payloadBytes != nil:
		m.Payload = r.payloadBytes
		if m.JSONPayload() && !json.Valid(m.Payload) {
			return []string{"payload_bytes is not valid JSON, which the content type requires"}
		}
	case r.payload.Valid:
		m.Payload = json.RawMessage(r.payload.String)
		if !r.validJSON && m.JSONPayload() && r.payload.String != "" && !json.Valid(m.Payload) {
			return []string{"payload is not valid JSON"}
		}
	}
	return nil
}

// createdAtLayouts are the forms PostgreSQL and ISO 8601 write times in.
var createdAtLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07", "2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"}

// parseCreatedAt reads a created_at kept as text in one of createdAtLayouts;
// the zero time (only the latency metric reads it) when it is none of them.
func parseCreatedAt(s string) time.Time {
	t, _ := dialect.ParseTime(strings.TrimSpace(s))
	return t
}

// decodeHeaders decodes a headers column into *h as json.Unmarshal does.
// The usual content, a flat object of strings without escapes (trace
// context), is decoded without reflection, its keys and values sharing s.
func decodeHeaders(s string, h *map[string]string) error {
	if m, ok := plainHeaders(s); ok {
		*h = m
		return nil
	}
	return json.Unmarshal([]byte(s), h)
}

// plainHeaders decodes s when it is valid UTF-8 and a JSON object whose keys
// and values are strings without escapes or control characters. For
// anything else ok is false, and json.Unmarshal decodes or refuses it.
func plainHeaders(s string) (map[string]string, bool) {
	if !utf8.ValidString(s) {
		return nil, false
	}
	i := skipJSONSpace(s, 0)
	if i == len(s) || s[i] != '{' {
		return nil, false
	}
	h := make(map[string]string, strings.Count(s, `"`)/4)
	if i = skipJSONSpace(s, i+1); i < len(s) && s[i] == '}' {
		return h, skipJSONSpace(s, i+1) == len(s)
	}
	for {
		k, j, ok := plainJSONString(s, i)
		if !ok {
			return nil, false
		}
		if j = skipJSONSpace(s, j); j == len(s) || s[j] != ':' {
			return nil, false
		}
		v, j, ok := plainJSONString(s, skipJSONSpace(s, j+1))
		if !ok {
			return nil, false
		}
		h[k] = v
		if j = skipJSONSpace(s, j); j == len(s) {
			return nil, false
		}
		switch s[j] {
		case ',':
			i = skipJSONSpace(s, j+1)
		case '}':
			return h, skipJSONSpace(s, j+1) == len(s)
		default:
			return nil, false
		}
	}
}

// plainJSONString returns the JSON string starting at s[i] and the index
// after it, when it has no escape and no control character.
func plainJSONString(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return s[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

// skipJSONSpace returns the index of the first byte from i on that is not
// JSON whitespace.
func skipJSONSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// fenceArgs returns the row ids and attempts of msgs, sorted by id so that
// concurrent statements lock rows in the same order.
func fenceArgs(msgs []*outbox.Message) ([]int64, []int32, error) {
	if i := slices.Index(msgs, nil); i >= 0 {
		return nil, nil, fmt.Errorf("message %d is nil", i)
	}
	ms := sqlcore.ByRowID(msgs, func(m *outbox.Message) *outbox.Message { return m })
	ids, attempts := make([]int64, len(ms)), make([]int32, len(ms))
	for i, m := range ms {
		ids[i], attempts[i] = m.RowID, int32(m.Attempt)
	}
	return ids, attempts, nil
}

// Ack marks the messages sent (status 1), or deletes them when p.Delete, in
// one statement fenced by each message's Attempt. It returns how many rows it
// changed; rows another relay took over, and rows no longer pending, are
// left alone and not counted.
func (s *Store) Ack(ctx context.Context, p outbox.AckParams) (int, error) {
	if len(p.Messages) == 0 {
		return 0, nil
	}
	ids, attempts, err := fenceArgs(p.Messages)
	if err != nil {
		return 0, fmt.Errorf("pgstore: ack: %w", err)
	}
	q, err := s.queriesFor(ctx, s.poolRow)
	if err != nil {
		return 0, err
	}
	sql := q.ack
	if p.Delete {
		sql = q.del
	}
	tag, err := s.pool.Exec(ctx, s.m.SQL(sql), ids, attempts)
	if err != nil {
		return 0, fmt.Errorf("pgstore: ack %d messages: %w", len(ids), err)
	}
	return int(tag.RowsAffected()), nil
}

// Reschedule makes the messages due again at their Retry.At and records
// Retry.Err in last_error (when the table has it), in one statement fenced
// like Ack. With p.Refund the claim's attempt is given back (retry_count - 1).
func (s *Store) Reschedule(ctx context.Context, p outbox.RescheduleParams) error {
	if len(p.Retries) == 0 {
		return nil
	}
	ids, attempts, ats, errs, err := retryArgs(p.Retries)
	if err != nil {
		return fmt.Errorf("pgstore: reschedule: %w", err)
	}
	q, err := s.queriesFor(ctx, s.poolRow)
	if err != nil {
		return err
	}
	refund := 0
	if p.Refund {
		refund = 1
	}
	if _, err := s.pool.Exec(ctx, s.m.SQL(q.reschedule), ids, attempts, ats, errs, refund); err != nil {
		return fmt.Errorf("pgstore: reschedule %d messages: %w", len(ids), err)
	}
	return nil
}

// retryArgs returns the parameters of a reschedule statement, sorted by id.
func retryArgs(retries []outbox.Retry) ([]int64, []int32, []time.Time, []string, error) {
	for i, r := range retries {
		if r.Message == nil {
			return nil, nil, nil, nil, fmt.Errorf("retry %d has a nil message", i)
		}
	}
	rs := sqlcore.ByRowID(retries, func(r outbox.Retry) *outbox.Message { return r.Message })
	ids, attempts, ats, errs := make([]int64, len(rs)), make([]int32, len(rs)), make([]time.Time, len(rs)), make([]string, len(rs))
	for i, r := range rs {
		ids[i], attempts[i], ats[i], errs[i] = r.Message.RowID, int32(r.Message.Attempt), r.At, sqlcore.PGText(r.Err)
	}
	return ids, attempts, ats, errs, nil
}

// Kill marks the messages dead (status 2) and records each reason in
// last_error (when the table has it), in one statement fenced like Ack.
func (s *Store) Kill(ctx context.Context, p outbox.KillParams) error {
	if len(p.Dead) == 0 {
		return nil
	}
	ids, attempts, reasons, err := deadArgs(p.Dead)
	if err != nil {
		return fmt.Errorf("pgstore: kill: %w", err)
	}
	q, err := s.queriesFor(ctx, s.poolRow)
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.m.SQL(q.kill), ids, attempts, reasons); err != nil {
		return fmt.Errorf("pgstore: kill %d messages: %w", len(ids), err)
	}
	return nil
}

// deadArgs returns the parameters of a kill statement, sorted by id.
func deadArgs(dead []outbox.Dead) ([]int64, []int32, []string, error) {
	for i, d := range dead {
		if d.Message == nil {
			return nil, nil, nil, fmt.Errorf("dead %d has a nil message", i)
		}
	}
	ds := sqlcore.ByRowID(dead, func(d outbox.Dead) *outbox.Message { return d.Message })
	ids, attempts, reasons := make([]int64, len(ds)), make([]int32, len(ds)), make([]string, len(ds))
	for i, d := range ds {
		ids[i], attempts[i], reasons[i] = d.Message.RowID, int32(d.Message.Attempt), sqlcore.PGText(d.Reason)
	}
	return ids, attempts, reasons, nil
}

// Stats reports the backlog in one query: pending rows (leased ones
// included) and the age of the oldest, dead rows, rows acknowledged in the
// last minute and hour (counted by updated_at, so only when sent rows are
// kept), and rows of any other status (NULL, or not 0, 1 or 2), which the
// relay leaves alone. It reads every pending, dead and other-status row and
// the last hour's sent rows.
func (s *Store) Stats(ctx context.Context) (*outbox.Stats, error) {
	q, err := s.queriesFor(ctx, s.poolRow)
	if err != nil {
		return nil, err
	}
	return s.core.Stats(ctx, q.stats, nil, func(oldest any) (time.Duration, error) {
		micros, _ := oldest.(int64)
		return rowcheck.Age(micros), nil
	})
}

// rescanEvery is how often, at least, an unordered claim starts from the
// first due row rather than after the last full batch (see claimCursor).
const rescanEvery = 250 * time.Millisecond

// claimCursor lets the next unordered claim start after the rows of the
// batches the store has in flight. A claim walks the pending rows in id
// order and must step over every one that is claimed already, locked (held
// claims) or leased (a row lease's next_retry_at, a batch lease's ids): with
// 4 batches of 1,000 in flight that is 3,000 rows, which made a held claim of
// 1,000 rows cost PostgreSQL four times as much as one that skips nothing. So
// while claims come back full, the next one starts after the highest id
// claimed so far; once a claim comes back short (it reached the end of the
// backlog), and at least every rescanEvery, a claim starts from the first
// due row again, which picks up what the cursor passed over: rows committed
// late with lower ids, retries that came due, batches rolled back.
type claimCursor struct {
	every    time.Duration // rescanEvery; set before first use (tests shorten or lengthen it)
	after    atomic.Int64  // claim rows with ids above this; 0: from the first
	lastScan atomic.Int64  // when (Unix ns) a claim last started from the first row
}

// start returns the id after which the next claim starts.
func (c *claimCursor) start(now time.Time) int64 {
	after := c.after.Load()
	if after == 0 || now.UnixNano()-c.lastScan.Load() >= int64(c.every) {
		c.lastScan.Store(now.UnixNano())
		return 0
	}
	return after
}

// claimed moves the cursor after a claim that started after after (and,
// when that came back short, took the rest from the first due row).
func (c *claimCursor) claimed(after int64, claim *outbox.Claim, limit int) {
	if claimSize(claim) < limit {
		c.after.Store(0) // the end of the due rows: start from the first again
		return
	}
	top := after
	for _, m := range claim.Messages {
		top = max(top, m.RowID)
	}
	for _, m := range claim.Malformed {
		top = max(top, m.Message.RowID)
	}
	for {
		cur := c.after.Load()
		if cur >= top || c.after.CompareAndSwap(cur, top) {
			return
		}
	}
}

// claimSize is how many rows a claim holds.
func claimSize(c *outbox.Claim) int { return len(c.Messages) + len(c.Malformed) }

// finiteTime is a timestamp column's time, zero for NULL and for the
// infinities (an expires_at of 'infinity' never expires).
func finiteTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return t.Time
}
