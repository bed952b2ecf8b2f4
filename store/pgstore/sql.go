package pgstore

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/internal/rowcheck"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// dialect is PostgreSQL's SQL for the statements sqlcore builds (the
// dead-letter admin, CountRows): "?" parameters, which poolRunner numbers,
// and columns read as text, so that pgx hands back what sqlcore decodes.
var dialect = &sqlcore.Dialect{
	Store:         "pgstore",
	Quote:         '"',
	MaxIdent:      63,
	PayloadPrefix: "substring(%s FROM 1 FOR %d)",
	PayloadBytes:  "octet_length(%s)::bigint",
	Casts: map[string]string{
		sqlcore.ColMessageID: "::text", sqlcore.ColAggregateType: "::text", sqlcore.ColAggregateID: "::text",
		sqlcore.ColEventType: "::text", sqlcore.ColPayload: "::text", sqlcore.ColHeaders: "::text",
		sqlcore.ColTopic: "::text", sqlcore.ColPartitionKey: "::text", sqlcore.ColContentType: "::text",
	},
	ErrorContains: "strpos(last_error, ?) > 0",
	// The attempts within an integer (a bigint column may hold more).
	DeadHead:      fmt.Sprintf("c.id, LEAST(GREATEST(COALESCE(c.retry_count, 0), 0), %d)::integer", rowcheck.MaxAttempt),
	UpdatedBefore: "updated_at <= now() - ?::bigint * interval '1 microsecond'",
	AgeArg:        func(age time.Duration) any { return age.Microseconds() },
	RetryDead: "UPDATE %[1]s SET status = 0, retry_count = 0, next_retry_at = NULL, updated_at = now()" +
		" WHERE id IN (SELECT id FROM %[1]s WHERE %[2]s LIMIT %[3]d FOR UPDATE SKIP LOCKED)",
	DiscardDead: "DELETE FROM %[1]s WHERE id IN (SELECT id FROM %[1]s WHERE %[2]s LIMIT %[3]d FOR UPDATE SKIP LOCKED)",
	// A created_at kept as text, in the forms PostgreSQL and ISO 8601 write.
	TimeLayouts: createdAtLayouts,
}

// queries are a table's statements, built once from its columns. The table
// name in them is quoted by pgx.Identifier; every value is a parameter.
type queries struct {
	sqlcore.Columns      // the optional columns the table has
	payloadJSON     bool // the payload column is json or jsonb
	utf8            bool // the server encoding is UTF8
	createdAtText   bool // created_at is text: read as text, parsed by message

	columnList   string        // the columns a claimedRow scans, of the table aliased o
	dataColumns  string        // columnList without id and the attempt
	lease        *leaseQueries // WithBatchLease's statements (claim_batchlease.go), nil without it
	held         *heldQueries  // WithHeldClaims's statements (claim_held.go), nil without it
	insert       string        // $1..$12 the columns as arrays
	insertNotify string        // insert, and NOTIFY channel $13 when the transaction commits
	claim        [3]string     // unordered, ordered, ordered with dead rows blocking
	claimStatus  string        // unordered, on the (status, next_retry_at) index (indexes.go); $1 limit, $2 lease µs
	ack          string
	del          string
	reschedule   string
	kill         string
	stats        string
}

// counted is the SQL of the attempts a row's retry_count says were made,
// within what a claim counts: NULL and negative counts are 0, and counts at
// or past rowcheck.MaxAttempt - 1 (an integer column's limit, or a bigint
// column's larger value) are rowcheck.MaxAttempt - 1, so that nextAttempt
// never overflows an integer, which would fail every claim.
func counted(col string) string {
	return fmt.Sprintf("LEAST(GREATEST(COALESCE(%s, 0), 0), %d)::integer", col, rowcheck.MaxAttempt-1)
}

// nextAttempt is the SQL of the attempt a claim hands out for a row, and
// writes as its retry_count: counted + 1, at most rowcheck.MaxAttempt (a row
// handed out with it comes back malformed, claimedRow.message).
func nextAttempt(col string) string { return counted(col) + " + 1" }

const (
	claimUnordered = iota
	claimOrdered
	claimOrderedBlockOnDead
)

// claimPayloadParam is the number of the parameter that carries the payload
// limit in claim statement i (of claim or the batch leases' claim): after
// the limit, the lease and, unordered, the range of ids.
func claimPayloadParam(i int) int {
	if i == claimUnordered {
		return 5
	}
	return 3
}

// maxPayloadParam stands, in the claimed columns (columnList, dataColumns),
// for the parameter that carries the claim's payload limit, which each
// statement numbers its own way (payloadParam puts the number in).
const maxPayloadParam = "$max_payload"

// payloadColumn reads the payload as text; with a payload limit (the
// parameter is above 0), at most limit + 1 characters of it. That is all of
// a payload within the limit (a character takes at least a byte) and enough
// of a larger one to tell that it is larger, so a claim never reads a huge
// payload: it reports the row (rowcheck.TooLarge) and its size is read on its
// own (readPayloadSizes).
const payloadColumn = "CASE WHEN " + maxPayloadParam + "::integer > 0 THEN left(o.payload::text, " +
	maxPayloadParam + "::integer + 1) ELSE o.payload::text END"

// payloadBytesColumn reads payload_bytes as payloadColumn reads payload: at
// most limit + 1 bytes of it with a limit.
const payloadBytesColumn = "CASE WHEN " + maxPayloadParam + "::integer > 0 THEN substring(o.payload_bytes FROM 1 FOR " +
	maxPayloadParam + "::integer + 1) ELSE o.payload_bytes END"

// payloadSize is the SQL of the size in bytes of a row's payload (of the
// table aliased o): payload_bytes's when the table has it and it is set.
func (q *queries) payloadSize() string {
	if q.PayloadBytes {
		return "COALESCE(octet_length(o.payload_bytes), octet_length(o.payload::text))"
	}
	return "octet_length(o.payload::text)"
}

// payloadParam numbers the payload limit's parameter of sql: $n.
func payloadParam(sql string, n int) string {
	return strings.ReplaceAll(sql, maxPayloadParam, "$"+strconv.Itoa(n))
}

// payloadLimit is ClaimParams.MaxPayload as the parameter of payloadColumn.
func payloadLimit(n int) int32 { return int32(rowcheck.PayloadLimit(n)) }

// jsonCast returns the cast that turns a text parameter into the column's type.
func jsonCast(col, typ string) (string, error) {
	switch {
	case typ == "jsonb" || typ == "json":
		return "::" + typ, nil
	case typ == "text" || strings.HasPrefix(typ, "character varying"):
		return "", nil
	}
	return "", fmt.Errorf("column %s is %s; want jsonb, json or text", col, typ)
}

// buildOptions are the Store's settings that shape its statements.
type buildOptions struct {
	asyncCommit bool   // relay statements set synchronous_commit = off for their transaction
	leaseTable  string // the batch lease table, quoted, with WithBatchLease; "" otherwise
	heldClaims  bool   // WithHeldClaims
	utf8        bool   // the server encoding is UTF8
}

// asyncCommitFilter is a one-time filter (an InitPlan, evaluated once per
// statement) that sets synchronous_commit = off for the statement's own
// implicit transaction, so WithAsyncCommit costs no extra round trip.
const asyncCommitFilter = "\n\tAND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL"

// asyncFilter is asyncCommitFilter with WithAsyncCommit, "" otherwise.
func (s *Store) asyncFilter() string {
	if s.cfg.asyncCommit {
		return asyncCommitFilter
	}
	return ""
}

// statusWindow is the start of a claim on the (status, next_retry_at)
// index (indexes.go): the ids of a window of 4 × $1 (at least 256) due rows,
// the rows due again (due) and then the rows never claimed (fresh). The
// table is %[1]s.
const statusWindow = `WITH due AS (
	SELECT w.id FROM %[1]s AS w
	WHERE w.status = 0 AND w.next_retry_at <= now()
	ORDER BY w.status, w.next_retry_at
	LIMIT greatest(4 * $1, 256)
), fresh AS (
	SELECT w.id FROM %[1]s AS w
	WHERE w.status = 0 AND w.next_retry_at IS NULL
	ORDER BY w.status, w.next_retry_at
	LIMIT (SELECT greatest(4 * $1, 256) - count(*) FROM due)
)`

func buildQueries(table string, cols map[string]string, opt buildOptions) (*queries, error) {
	async := ""
	if opt.asyncCommit {
		async = asyncCommitFilter
	}
	var missing []string
	for _, c := range sqlcore.ContractColumns {
		if _, ok := cols[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("missing contract columns: %s", strings.Join(missing, ", "))
	}
	q := &queries{}
	_, q.Headers = cols["headers"]
	_, q.Topic = cols["topic"]
	_, q.PartitionKey = cols["partition_key"]
	_, q.LastError = cols["last_error"]
	_, q.ContentType = cols["content_type"]
	_, q.PayloadBytes = cols["payload_bytes"]
	_, q.DeliverAt = cols["deliver_at"]
	_, q.ExpiresAt = cols["expires_at"]

	payloadCast, err := jsonCast("payload", cols["payload"])
	if err != nil {
		return nil, err
	}
	q.payloadJSON, q.utf8 = payloadCast != "", opt.utf8

	if err := q.buildInsert(table, cols, payloadCast); err != nil {
		return nil, err
	}
	q.buildClaims(table, cols, async)
	lastErr := q.buildSettle(table, async)
	// Stats reads pending and dead rows through the status index, only the
	// sent rows of the last hour, and rows of any other status (NULL, below
	// 0, above 2: a status column is an integer) as index ranges too, so
	// that it never reads all sent rows.
	q.stats = fmt.Sprintf(`SELECT
	count(*) FILTER (WHERE status = 0),
	COALESCE((EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 0 AND isfinite(created_at))) * 1000000)::bigint, 0),
	count(*) FILTER (WHERE status = 2),
	count(*) FILTER (WHERE status = 1 AND updated_at >= now() - interval '1 minute'),
	count(*) FILTER (WHERE status = 1 AND updated_at >= now() - interval '1 hour'),
	count(*) FILTER (WHERE status IS NULL OR status < 0 OR status > 2)
FROM %s
WHERE status IN (0, 2) OR (status = 1 AND updated_at >= now() - interval '1 hour')
	OR status IS NULL OR status < 0 OR status > 2`, table)
	if opt.leaseTable != "" {
		buildLeaseQueries(q, table, opt.leaseTable, lastErr, async)
	}
	if opt.heldClaims {
		q.held = buildHeldQueries(table, q.dataColumns, lastErr, async)
	}
	return q, nil
}

// buildInsert builds the INSERT of a batch, and the one that also notifies.
func (q *queries) buildInsert(table string, cols map[string]string, payloadCast string) error {
	// Insert: one statement for the whole batch, rows in the order given so
	// that ids follow write order.
	names := []string{"message_id", "aggregate_type", "aggregate_id", "event_type", "payload"}
	exprs := []string{"m.message_id", "m.aggregate_type", "m.aggregate_id", "m.event_type", "m.payload" + payloadCast}
	if q.Headers {
		cast, err := jsonCast("headers", cols["headers"])
		if err != nil {
			return err
		}
		names, exprs = append(names, "headers"), append(exprs, "m.headers"+cast)
	}
	if q.Topic {
		names, exprs = append(names, "topic"), append(exprs, "NULLIF(m.topic, '')")
	}
	if q.PartitionKey {
		names, exprs = append(names, "partition_key"), append(exprs, "NULLIF(m.partition_key, '')")
	}
	if q.ContentType {
		names, exprs = append(names, "content_type"), append(exprs, "NULLIF(m.content_type, '')")
	}
	if q.PayloadBytes {
		names, exprs = append(names, "payload_bytes"), append(exprs, "m.payload_bytes")
	}
	// A delayed message is written due at its time: deliver_at keeps the
	// time asked for, next_retry_at (which the claims filter on, through
	// their indexes) starts there, so the claims need no change.
	if q.DeliverAt {
		names, exprs = append(names, "deliver_at", "next_retry_at"), append(exprs, "m.deliver_at", "m.deliver_at")
	}
	if q.ExpiresAt {
		names, exprs = append(names, "expires_at"), append(exprs, "m.expires_at")
	}
	q.insert = fmt.Sprintf(`INSERT INTO %s (%s)
SELECT %s
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bytea[],
	$11::timestamptz[], $12::timestamptz[])
	WITH ORDINALITY AS m(message_id, aggregate_type, aggregate_id, event_type, payload, headers, topic, partition_key, content_type, payload_bytes,
		deliver_at, expires_at, ord)
ORDER BY m.ord`, table, strings.Join(names, ", "), strings.Join(exprs, ", "))
	q.insertNotify = "WITH ins AS (" + q.insert + ") SELECT pg_notify($13, '')"

	return nil
}

// claimColumns returns what a claim returns, in claimedRow.dest's order:
// the contract's columns and the optional ones the table has. A created_at
// kept as text (a team's own table) is read as text: a cast to timestamptz
// in the statement would fail the whole claim on one row whose text is not
// a time.
func (q *queries) claimColumns(cols map[string]string) []string {
	createdAt := "o.created_at::timestamptz"
	if t := cols["created_at"]; t == "text" || strings.HasPrefix(t, "character") {
		q.createdAtText, createdAt = true, "o.created_at::text"
	}
	returning := []string{
		"o.id", "COALESCE(o.retry_count, 0)", "o.message_id::text", "o.aggregate_type::text", "o.aggregate_id::text",
		"o.event_type::text", payloadColumn, createdAt,
	}
	for _, opt := range []struct {
		has bool
		col string
	}{
		{q.Headers, "o.headers::text"}, {q.Topic, "o.topic::text"}, {q.PartitionKey, "o.partition_key::text"},
		{q.ContentType, "o.content_type::text"}, {q.PayloadBytes, payloadBytesColumn},
		{q.DeliverAt, "o.deliver_at::timestamptz"}, {q.ExpiresAt, "o.expires_at::timestamptz"},
	} {
		if opt.has {
			returning = append(returning, opt.col)
		}
	}
	return returning
}

// buildClaims builds the unordered and ordered claims and the claim on the
// (status, next_retry_at) index.
func (q *queries) buildClaims(table string, cols map[string]string, async string) {
	// Claim: lock due rows without waiting for other relays' locks, count the
	// attempt and lease them, all in one statement (one implicit transaction).
	returning := q.claimColumns(cols)
	q.columnList = strings.Join(returning, ", ")
	q.dataColumns = strings.Join(returning[2:], ", ")
	for i, head := range []string{
		"\n\t  AND o.id > $3 AND o.id <= $4", // unordered: the ids (lo, hi] of claimCursor
		"\n\t  AND NOT EXISTS (SELECT 1 FROM %[1]s AS p WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id AND p.id < o.id AND p.status = 0)",
		"\n\t  AND NOT EXISTS (SELECT 1 FROM %[1]s AS p WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id AND p.id < o.id AND p.status IN (0, 2))",
	} {
		q.claim[i] = fmt.Sprintf(`WITH c AS (
	SELECT o.id FROM %[1]s AS o
	WHERE o.status = 0 AND (o.next_retry_at IS NULL OR o.next_retry_at <= now())`+head+async+`
	ORDER BY o.id
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)
UPDATE %[1]s AS o
SET retry_count = %[3]s,
	next_retry_at = now() + $2::bigint * interval '1 microsecond',
	updated_at = now()
FROM c
WHERE o.id = c.id
RETURNING %[2]s`, table, q.columnList, nextAttempt("o.retry_count"))
		q.claim[i] = payloadParam(q.claim[i], claimPayloadParam(i))
	}

	// Without the pending index (indexes.go): a window of the due rows,
	// then the rows never claimed, each an ordered range of the (status,
	// next_retry_at) index, so that neither sent nor leased rows are read;
	// the claim takes the oldest rows of the window.
	q.claimStatus = fmt.Sprintf(statusWindow+`, c AS (
	SELECT o.id FROM %[1]s AS o
	WHERE o.id = ANY (ARRAY(SELECT id FROM due UNION ALL SELECT id FROM fresh))
	  AND o.status = 0 AND (o.next_retry_at IS NULL OR o.next_retry_at <= now())%[4]s
	ORDER BY o.id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED
)
UPDATE %[1]s AS o
SET retry_count = %[3]s,
	next_retry_at = now() + $2::bigint * interval '1 microsecond',
	updated_at = now()
FROM c
WHERE o.id = c.id
RETURNING %[2]s`, table, q.columnList, nextAttempt("o.retry_count"), async)
	q.claimStatus = payloadParam(q.claimStatus, 3)
}

// buildSettle builds the statements that acknowledge, delete, reschedule
// and kill, and returns the SET clause of last_error they share ("" when the
// table has no last_error column).
func (q *queries) buildSettle(table, async string) (lastErr string) {
	// The fence every later statement shares: the row is still pending and
	// its retry_count is still the attempt the claim handed out.
	fence := "o.id = a.id AND o.retry_count = a.attempt AND o.status = 0" + async

	q.ack = fmt.Sprintf(`UPDATE %s AS o SET status = 1, updated_at = now()
FROM unnest($1::bigint[], $2::integer[]) AS a(id, attempt)
WHERE %s`, table, fence)
	q.del = fmt.Sprintf(`DELETE FROM %s AS o
USING unnest($1::bigint[], $2::integer[]) AS a(id, attempt)
WHERE %s`, table, fence)

	if q.LastError {
		lastErr = ", last_error = a.err"
	}
	q.reschedule = fmt.Sprintf(`UPDATE %s AS o
SET next_retry_at = a.at, retry_count = GREATEST(o.retry_count - $5::integer, 0), updated_at = now()%s
FROM unnest($1::bigint[], $2::integer[], $3::timestamptz[], $4::text[]) AS a(id, attempt, at, err)
WHERE %s`, table, lastErr, fence)
	q.kill = fmt.Sprintf(`UPDATE %s AS o SET status = 2, updated_at = now()%s
FROM unnest($1::bigint[], $2::integer[], $3::text[]) AS a(id, attempt, err)
WHERE %s`, table, lastErr, fence)
	return lastErr
}
