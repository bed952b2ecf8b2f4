package pgcdc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/internal/rowcheck"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// table is what the source writes to the outbox table: it settles kept rows
// behind the stream and records dead messages. Every statement is whole
// here, with the quoted names of the table and of its columns (see
// WithColumns) as the only parts filled in.
type table struct {
	pool      *pgxpool.Pool
	ident     string // quoted
	schema    string // "" when unqualified
	name      string
	raw       string // as configured
	lastError bool   // the table has a last_error column
	headers   bool   // and headers, topic, partition_key
	content   bool   // and content_type, payload_bytes
	times     bool   // and deliver_at, expires_at
	// cols maps the contract's column names to the table's (WithColumns);
	// nil: the contract's own names. rev is the other way round (nil too).
	cols    colmap.Map
	rev     map[string]string
	logOnly bool              // no state columns: nothing is written back
	sql     *strings.Replacer // {T} and {column} in a statement -> quoted names
}

func newTable(pool *pgxpool.Pool, name string, cols colmap.Map) *table {
	t := &table{pool: pool, name: name, raw: name}
	parts := strings.Split(name, ".")
	if len(parts) == 2 {
		t.schema, t.name = parts[0], parts[1]
	}
	t.ident = pgx.Identifier(parts).Sanitize()
	if len(cols) > 0 {
		t.cols, t.rev, t.logOnly = cols, cols.Reverse(), cols.LogOnly()
	}
	pairs := []string{"{T}", t.ident}
	for _, c := range colmap.Contract() {
		v, ok := t.cols.Column(c)
		if !ok {
			v = c // not mapped: no statement that names it runs on this table
		}
		pairs = append(pairs, "{"+c+"}", pgx.Identifier{v}.Sanitize())
	}
	t.sql = strings.NewReplacer(pairs...)
	return t
}

// q fills the table's quoted name ({T}) and its columns' ({status}, ...)
// into a statement.
func (t *table) q(stmt string) string { return t.sql.Replace(stmt) }

// has reports whether the table's column names holds contract column c.
func (t *table) has(names map[string]bool, c string) bool {
	v, ok := t.cols.Column(c)
	return ok && names[v]
}

// readColumns returns the names of the table's columns.
func (t *table) readColumns(ctx context.Context) ([]string, error) {
	rows, err := t.pool.Query(ctx, `SELECT attname FROM pg_attribute
WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, t.ident)
	if err != nil {
		return nil, fmt.Errorf("pgcdc: read the columns of %s: %w", t.ident, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("pgcdc: read the columns of %s: %w", t.ident, err)
	}
	return names, nil
}

// columns finds out which optional columns the table has; with a mapping,
// it fails when the table lacks a mapped column.
func (t *table) columns(ctx context.Context) error {
	names, err := t.readColumns(ctx)
	if err != nil {
		return err
	}
	if t.cols != nil {
		if err := t.cols.Check(t.raw, names); err != nil {
			return fmt.Errorf("pgcdc: %w", err)
		}
	}
	has := make(map[string]bool, len(names))
	for _, n := range names {
		has[n] = true
	}
	t.lastError = t.has(has, colmap.LastError)
	t.headers = t.has(has, colmap.Headers) && t.has(has, colmap.Topic) && t.has(has, colmap.PartitionKey)
	t.content = t.has(has, colmap.ContentType) && t.has(has, colmap.PayloadBytes)
	t.times = t.has(has, colmap.DeliverAt) && t.has(has, colmap.ExpiresAt)
	return nil
}

// contract returns the contract's name of the table's column col, "" for a
// column the mapping does not name.
func (t *table) contract(col string) string {
	if t.rev == nil {
		return col
	}
	return t.rev[col]
}

// rowState is what a claim's look-up found of a row the table holds.
type rowState struct {
	status int16 // -1 for NULL
	// count is the row's retry_count: after the claim's count for a counted
	// row, as read for a fresh one; 0 unless pending.
	count int
}

// MarkTable is the name of the side table, in the outbox table's schema,
// in which a source records per slot the position of the last message it
// handed out without counting its attempt in the outbox table (one row per
// slot: slot, lsn, seq, updated_at). [Setup] creates it, a streaming source
// creates it when it is missing, and [DropSlot] deletes the dropped slot's
// row. It may be dropped once no slot has a row in it.
const MarkTable = "outbox_cdc_handed"

// markDDL creates the side table whose quoted name is ident, unless it exists.
func markDDL(ident string) string {
	return `CREATE TABLE IF NOT EXISTS ` + ident + ` (
	slot       text PRIMARY KEY,
	lsn        bigint NOT NULL,
	seq        integer NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now()
)`
}

// markIdent returns the quoted name of the side table in schema ("" for
// the search path's first schema).
func markIdent(schema string) string {
	if schema == "" {
		return pgx.Identifier{MarkTable}.Sanitize()
	}
	return pgx.Identifier{schema, MarkTable}.Sanitize()
}

// handedIdent is the quoted name of the side table.
func (t *table) handedIdent() string { return markIdent(t.schema) }

// ensureHanded creates the side table when it is missing and reports
// whether it can be used; without it every claim counts its attempts in
// the outbox table, as before the side table existed.
func (t *table) ensureHanded(ctx context.Context, log *slog.Logger) bool {
	_, err := t.pool.Exec(ctx, markDDL(t.handedIdent()))
	if err == nil {
		return true
	}
	var ok bool // made meanwhile by another process?
	if qerr := t.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t.handedIdent()).Scan(&ok); qerr == nil && ok {
		return true
	}
	log.LogAttrs(ctx, slog.LevelWarn, "cannot create the handed-out mark table, counting every attempt in the table",
		slog.String("table", t.handedIdent()), slog.String("error", err.Error()))
	return false
}

// handedMark returns the slot's mark: every message at or before it may
// have been handed out by a reader of the slot without its attempt being
// counted in the outbox table; none after it was. Zero when none is recorded.
func (t *table) handedMark(ctx context.Context, slot string) (pos, error) {
	var lsn int64
	var seq int32
	err := t.pool.QueryRow(ctx, `SELECT lsn, seq FROM `+t.handedIdent()+` WHERE slot = $1`, slot).Scan(&lsn, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return pos{}, nil
	}
	if err != nil {
		return pos{}, fmt.Errorf("pgcdc: read the handed-out mark: %w", err)
	}
	return pos{lsn: pglogrepl.LSN(lsn), seq: int(seq)}, nil
}

// visibleSQL is true when every one of the transactions $2 (32-bit ids, as
// pgoutput's BEGIN gives them) is visible to the statement's own snapshot.
// The server may send a transaction a moment before it is visible to other
// sessions (its commit is in the log before the backend leaves the
// snapshot's running set), and a look-up in that moment would take its rows
// for deleted. The 64-bit id is rebuilt with the epoch of the snapshot's
// xmax, one less when the 32-bit id is above xmax's (the counter wrapped
// since).
const visibleSQL = `SELECT COALESCE(bool_and(pg_visible_in_snapshot(
		((((pg_snapshot_xmax(snap.s)::text::bigint) >> 32)
		  - CASE WHEN x > (pg_snapshot_xmax(snap.s)::text::bigint & 4294967295) THEN 1 ELSE 0 END) << 32 | x)::text::xid8,
		snap.s)), true) AS ok
	FROM (SELECT pg_current_snapshot() AS s) AS snap, unnest($2::bigint[]) AS x`

// claim is what one claim asks of the table: the rows to look up, and for
// each whether to count its attempt.
type claim struct {
	ids  []int64
	xids []int64 // the transactions that must be visible first (see visibleSQL)
	// floors: per row, -1 to count nothing (a fresh claim: the row is only
	// read), else the attempts handed out before this claim, so that the
	// count becomes at least floor + 1 (it catches up an earlier fresh
	// claim, which the table did not count).
	floors []int32
	slot   string
	mark   *pos // with fresh claims: raise the slot's mark to it
}

// claimRows looks up the rows of c, once the transactions c.xids (see
// visibleSQL) are visible to its snapshot, in one statement: one round trip
// on each message's way to the broker. Each pending row with a floor gets
// the claim's attempt counted in the table (retry_count + 1, at least
// floor + 1, clamped as pgstore clamps it), so that attempts survive a
// restart as the polling relay's do; a fresh row is only read, and the
// slot's mark is raised to c.mark in the same statement, before the
// messages are handed out. visible false means the transactions were not
// visible yet: the statement changed and read nothing, and is to be run
// again. Otherwise it returns the state of each row the table holds; a row
// it does not hold (deleted by its writer) is not in the map. Every part of
// the statement reads the same snapshot, pg_current_snapshot's.
func (t *table) claimRows(ctx context.Context, c claim) (visible bool, st map[int64]rowState, err error) {
	top := rowcheck.MaxAttempt - 1
	args := []any{c.ids, c.xids, c.floors}
	mark := ""
	if c.mark != nil {
		mark = `,
m AS (
	INSERT INTO ` + t.handedIdent() + ` AS h (slot, lsn, seq) SELECT $4, $5, $6 WHERE (SELECT ok FROM v)
	ON CONFLICT (slot) DO UPDATE SET lsn = EXCLUDED.lsn, seq = EXCLUDED.seq, updated_at = now()
	WHERE (h.lsn, h.seq) < (EXCLUDED.lsn, EXCLUDED.seq)
)`
		args = append(args, c.slot, int64(c.mark.lsn), int32(c.mark.seq))
	}
	q := fmt.Sprintf(`WITH v AS (`+visibleSQL+`),
r AS (SELECT * FROM unnest($1::bigint[], $3::integer[]) AS r(id, floor)),
c AS (
	UPDATE {T} AS o SET {retry_count} = GREATEST(LEAST(GREATEST(COALESCE(o.{retry_count}, 0), 0), %[1]d),
	                                      LEAST(GREATEST(r.floor, 0), %[1]d))::integer + 1
	FROM r WHERE o.{id} = r.id AND r.floor >= 0 AND o.{status} = 0 AND (SELECT ok FROM v)
	RETURNING o.{id}, o.{retry_count}
)`+mark+`
SELECT v.ok, NULL::bigint, NULL::smallint, NULL::integer FROM v
	WHERE (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
UNION ALL
SELECT true, {id}, 0::smallint, {retry_count} FROM c
UNION ALL
SELECT true, o.{id}, COALESCE(o.{status}, -1)::smallint, COALESCE(o.{retry_count}, 0)::integer
	FROM {T} AS o JOIN r ON o.{id} = r.id
	WHERE (r.floor < 0 OR o.{status} IS DISTINCT FROM 0) AND (SELECT ok FROM v)`, top)
	rows, err := t.pool.Query(ctx, t.q(q), args...)
	if err != nil {
		return false, nil, fmt.Errorf("pgcdc: claim rows: %w", err)
	}
	defer rows.Close()
	st = make(map[int64]rowState, len(c.ids))
	for rows.Next() {
		var ok bool
		var id pgtype.Int8
		var status pgtype.Int2
		var count pgtype.Int4
		if err := rows.Scan(&ok, &id, &status, &count); err != nil {
			return false, nil, fmt.Errorf("pgcdc: claim rows: %w", err)
		}
		if !id.Valid { // v's row
			visible = ok
			continue
		}
		r := rowState{status: status.Int16}
		if r.status == 0 {
			r.count = int(count.Int32)
		}
		st[id.Int64] = r
	}
	if err := rows.Err(); err != nil {
		return false, nil, fmt.Errorf("pgcdc: claim rows: %w", err)
	}
	return visible, st, nil
}

// rowRetry is a retry of a kept row, copied out of its entry.
type rowRetry struct {
	id      int64
	attempt int
	counted int // the row's retry_count as the claim left it
	at      time.Time
	err     string
}

// reschedule records on pending rows what a claim's failure left, as the
// polling store's Reschedule does: when they are due again (next_retry_at,
// which a polling fallback honours; the stream keeps its own schedule in
// memory), the error, and with refund the attempt given back
// (retry_count - 1). Each row is fenced by the attempt it was handed out
// with: a row that another claim (a polling relay) counted again meanwhile
// is left as it is. Without refund the row's count becomes the attempt,
// which also records an attempt that a fresh claim did not count.
func (t *table) reschedule(ctx context.Context, retries []rowRetry, refund bool) error {
	n := len(retries)
	ids, attempts, ats, reasons := make([]int64, n), make([]int32, n), make([]time.Time, n), make([]string, n)
	counted := make([]int32, n)
	for i, r := range retries {
		ids[i], attempts[i], ats[i], reasons[i], counted[i] = r.id, int32(r.attempt), r.at, sqlcore.PGText(r.err), int32(r.counted)
	}
	back := 0
	if refund {
		back = 1
	}
	setErr := ""
	if t.lastError {
		setErr = ", {last_error} = r.err"
	}
	_, err := t.pool.Exec(ctx, t.q(`UPDATE {T} AS o
SET {next_retry_at} = r.at, {retry_count} = GREATEST(r.attempt - $5::integer, 0), {updated_at} = now()`+setErr+`
FROM unnest($1::bigint[], $2::integer[], $3::timestamptz[], $4::text[], $6::integer[]) AS r(id, attempt, at, err, counted)
WHERE o.{id} = r.id AND o.{status} = 0 AND o.{retry_count} = r.counted`), ids, attempts, ats, reasons, back, counted)
	if err != nil {
		return fmt.Errorf("pgcdc: reschedule %d rows: %w", n, err)
	}
	return nil
}

// markSent marks pending rows sent (or deletes them) and returns the ids
// it changed: a row no longer pending was settled by someone else (a polling
// relay during a failover), so the stream's copy was a duplicate.
func (t *table) markSent(ctx context.Context, ids []int64, del bool) (map[int64]bool, error) {
	q := `UPDATE {T} SET {status} = 1, {updated_at} = now() WHERE {id} = ANY($1) AND {status} = 0 RETURNING {id}`
	if del {
		q = `DELETE FROM {T} WHERE {id} = ANY($1) AND {status} = 0 RETURNING {id}`
	}
	changed, err := t.changedIDs(ctx, t.q(q), ids)
	if err != nil {
		return nil, fmt.Errorf("pgcdc: mark %d rows sent: %w", len(ids), err)
	}
	return changed, nil
}

// changedIDs runs a statement that returns ids and collects them.
func (t *table) changedIDs(ctx context.Context, q string, args ...any) (map[int64]bool, error) {
	rows, err := t.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	changed := make(map[int64]bool, len(ids))
	for _, id := range ids {
		changed[id] = true
	}
	return changed, nil
}

// markDead marks pending rows dead, recording the attempts and the
// reason, and returns the ids it changed.
func (t *table) markDead(ctx context.Context, dead []outbox.Dead) (map[int64]bool, error) {
	ids, attempts, reasons := make([]int64, len(dead)), make([]int32, len(dead)), make([]string, len(dead))
	for i, d := range dead {
		ids[i], attempts[i], reasons[i] = d.Message.RowID, int32(d.Message.Attempt), sqlcore.PGText(d.Reason)
	}
	setErr := ""
	if t.lastError {
		setErr = ", {last_error} = d.reason"
	}
	q := `UPDATE {T} AS o SET {status} = 2, {retry_count} = d.attempt, {updated_at} = now()` + setErr + `
FROM unnest($1::bigint[], $2::integer[], $3::text[]) AS d(id, attempt, reason)
WHERE o.{id} = d.id AND o.{status} = 0
RETURNING o.{id}`
	changed, err := t.changedIDs(ctx, t.q(q), ids, attempts, reasons)
	if err != nil {
		return nil, fmt.Errorf("pgcdc: mark %d rows dead: %w", len(dead), err)
	}
	return changed, nil
}

// insertDead records messages whose rows the writer deleted as dead rows,
// so that `outbox dead list` shows them; the stream ignores them (status 2).
func (t *table) insertDead(ctx context.Context, dead []outbox.Dead) error {
	n := len(dead)
	ids, aggTypes, aggIDs, events := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payloads, attempts, created := make([]string, n), make([]int32, n), make([]pgtype.Timestamptz, n)
	headers, topics, keys, reasons := make([]pgtype.Text, n), make([]pgtype.Text, n), make([]pgtype.Text, n), make([]string, n)
	types, raws := make([]pgtype.Text, n), make([][]byte, n)
	deliverAts, expiresAts := make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n)
	for i, d := range dead {
		m := d.Message
		ids[i], aggTypes[i], aggIDs[i], events[i] = m.MessageID, m.AggregateType, m.AggregateID, m.EventType
		payloads[i], attempts[i], reasons[i] = string(m.Payload), int32(m.Attempt), sqlcore.PGText(d.Reason)
		types[i] = pgtype.Text{String: m.ContentType, Valid: m.ContentType != ""}
		switch {
		case !m.JSONPayload():
			payloads[i], raws[i] = "null", m.Payload // bytes go to payload_bytes
		case !json.Valid(m.Payload):
			payloads[i] = "null" // a malformed row's payload is not kept; its reason says why
		}
		created[i] = pgtype.Timestamptz{Time: m.CreatedAt, Valid: !m.CreatedAt.IsZero()}
		deliverAts[i] = pgtype.Timestamptz{Time: m.DeliverAt, Valid: !m.DeliverAt.IsZero()}
		expiresAts[i] = pgtype.Timestamptz{Time: m.ExpiresAt, Valid: !m.ExpiresAt.IsZero()}
		if len(m.Headers) > 0 {
			b, _ := json.Marshal(m.Headers)
			headers[i] = pgtype.Text{String: string(b), Valid: true}
		}
		topics[i] = pgtype.Text{String: m.Topic, Valid: m.Topic != ""}
		keys[i] = pgtype.Text{String: m.PartitionKey, Valid: m.PartitionKey != ""}
	}
	cols := "{message_id}, {aggregate_type}, {aggregate_id}, {event_type}, {payload}, {status}, {retry_count}, {created_at}, {updated_at}"
	vals := "d.mid, d.atype, d.aid, d.ev, d.payload::jsonb, 2, d.attempt, COALESCE(d.created, now()), now()"
	if t.headers {
		cols += ", {headers}, {topic}, {partition_key}"
		vals += ", d.headers::jsonb, d.topic, d.pkey"
	}
	if t.lastError {
		cols += ", {last_error}"
		vals += ", d.reason"
	}
	if t.content {
		cols += ", {content_type}, {payload_bytes}"
		vals += ", d.ctype, d.raw"
	}
	if t.times {
		cols += ", {deliver_at}, {expires_at}"
		vals += ", d.deliver, d.expires"
	}
	q := `INSERT INTO {T} (` + cols + `)
SELECT ` + vals + `
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::integer[], $7::timestamptz[],
            $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::bytea[], $14::timestamptz[], $15::timestamptz[])
     AS d(mid, atype, aid, ev, payload, attempt, created, headers, topic, pkey, reason, ctype, raw, deliver, expires)
ON CONFLICT ({message_id}) DO NOTHING`
	_, err := t.pool.Exec(ctx, t.q(q), ids, aggTypes, aggIDs, events, payloads, attempts, created, headers, topics, keys, reasons, types, raws,
		deliverAts, expiresAts)
	if err != nil {
		return fmt.Errorf("pgcdc: record %d dead messages: %w", n, err)
	}
	return nil
}

// maxID returns the largest id in the table, 0 when it is empty.
func (t *table) maxID(ctx context.Context) (int64, error) {
	var id int64
	if err := t.pool.QueryRow(ctx, t.q(`SELECT COALESCE(max({id}), 0) FROM {T}`)).Scan(&id); err != nil {
		return 0, fmt.Errorf("pgcdc: read the largest id: %w", err)
	}
	return id, nil
}

// pendingUpTo reports whether a pending row with an id of at most id is left.
func (t *table) pendingUpTo(ctx context.Context, id int64) (bool, error) {
	var left bool
	err := t.pool.QueryRow(ctx, t.q(`SELECT EXISTS (SELECT 1 FROM {T} WHERE {status} = 0 AND {id} <= $1)`), id).Scan(&left)
	if err != nil {
		return false, fmt.Errorf("pgcdc: look for pending rows: %w", err)
	}
	return left, nil
}
