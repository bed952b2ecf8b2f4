package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// Batch leases (WithBatchLease).
//
// A row lease costs a claim one UPDATE per row: a new version of the row
// with its payload, and an entry in every index, since next_retry_at is
// indexed. That UPDATE is most of what a relay costs PostgreSQL. With batch
// leases a claim writes one row instead, in a side table: the claimed ids and
// when the lease ends. The claimed rows themselves are only read.
//
//   - Claims of a table take turns (an advisory lock held for the claim's
//     transaction, a few milliseconds), and each one skips the ids of the
//     leases that are still running. Taking turns is what makes it safe: each
//     claim's snapshot is taken after the previous claim committed its lease.
//   - The attempt is counted when the batch is settled: Ack, Reschedule and
//     Kill set retry_count to the attempt (Reschedule with Refund to the one
//     before), fenced by retry_count = attempt - 1 and status 0 as row leases
//     are fenced by retry_count = attempt; each also takes the ids it settled
//     out of their lease.
//   - A lease that ran out (its relay died or stalled) is recovered by the
//     next claim before it looks for rows: the ids still in it get their
//     attempt counted (retry_count + 1) and become claimable again. So an
//     attempt that never finished is counted as surely as with row leases,
//     and a message that crashes the relay every time still reaches max
//     attempts; and a relay that comes back after its lease was recovered is
//     fenced out, since the row's retry_count moved on.

// leaseSuffix names the side table after the outbox table.
const leaseSuffix = "_lease"

// leaseDDL creates the side table. Its rows are updated in place (ids shrink
// as batches settle), so leave room on each page for HOT updates.
const leaseDDL = `CREATE TABLE IF NOT EXISTS %s (
	id         bigserial   PRIMARY KEY,
	ids        bigint[]    NOT NULL,
	expires_at timestamptz NOT NULL
) WITH (fillfactor = 50)`

// leaseQueries are the statements of batch leases; Ack, Reschedule and Kill
// use the queries' ack, del, reschedule and kill, rebuilt for batch leases.
type leaseQueries struct {
	lockKey int64     // the advisory lock claims take turns on
	recover string    // counts the attempts of expired leases and drops them
	claim   [3]string // unordered, ordered, ordered with dead rows blocking; $1 limit, $2 lease µs, ...
}

// leaseTable returns the quoted name of the side table, in the table's
// schema, or "" without WithBatchLease.
func (s *Store) leaseTable() string {
	if !s.cfg.batchLease {
		return ""
	}
	return s.sideTable()
}

// sideTable returns the quoted name the side table of batch leases has, or
// would have, in the table's schema.
func (s *Store) sideTable() string {
	parts, _ := splitTable(s.cfg.table) // validated by New
	last := len(parts) - 1
	parts[last] = sqlcore.SideName(parts[last], leaseSuffix, 63)
	return pgx.Identifier(parts).Sanitize()
}

// tableExists says whether the table named $1 (quoted, as it would be in a
// statement) exists.
const tableExists = "SELECT to_regclass($1) IS NOT NULL"

// batchLeaseDone reports whether the side table exists, or is not needed.
func (s *Store) batchLeaseDone(ctx context.Context) (bool, error) {
	if !s.cfg.batchLease {
		return true, nil
	}
	var ok bool
	if err := s.pool.QueryRow(ctx, tableExists, s.leaseTable()).Scan(&ok); err != nil {
		return false, fmt.Errorf("pgstore: migrate %s: read catalog: %w", s.cfg.table, err)
	}
	return ok, nil
}

// installBatchLease creates the side table in tx, the migration's transaction.
func (s *Store) installBatchLease(ctx context.Context, tx pgx.Tx) error {
	if !s.cfg.batchLease {
		return nil
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(leaseDDL, s.leaseTable())); err != nil {
		return fmt.Errorf("pgstore: migrate %s: create lease table: %w", s.cfg.table, err)
	}
	return nil
}

// leaseLockKey is the advisory lock key a table's claims take turns on.
func leaseLockKey(ident string) int64 {
	h := fnv.New64a()
	h.Write([]byte("outbox/pgstore/claim " + ident))
	return int64(h.Sum64())
}

// buildLeaseQueries sets q.lease and replaces the settling statements with
// their batch-lease forms, which take the same parameters.
func buildLeaseQueries(q *queries, table, lease, lastErr, async string) {
	l := &leaseQueries{lockKey: leaseLockKey(table)}
	l.recover = fmt.Sprintf(`WITH x AS (
	DELETE FROM %[2]s WHERE expires_at <= now() OR cardinality(ids) = 0
	RETURNING ids, expires_at <= now() AS expired
)
UPDATE %[1]s AS o SET retry_count = %[3]s, updated_at = now()
FROM (SELECT DISTINCT unnest(x.ids) AS id FROM x WHERE x.expired) AS r
WHERE o.id = r.id AND o.status = 0`, table, lease, nextAttempt("o.retry_count"))
	for i, head := range []string{
		"\n\t  AND o.id > $3 AND o.id <= $4", // unordered: the ids (lo, hi] of claimCursor
		"\n\t  AND NOT EXISTS (SELECT 1 FROM %[1]s AS p WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id AND p.id < o.id AND p.status = 0)",
		"\n\t  AND NOT EXISTS (SELECT 1 FROM %[1]s AS p WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id AND p.id < o.id AND p.status IN (0, 2))",
	} {
		l.claim[i] = fmt.Sprintf(`WITH c AS (
	SELECT o.id, %[4]s AS attempt, %[3]s
	FROM %[1]s AS o
	WHERE o.status = 0 AND (o.next_retry_at IS NULL OR o.next_retry_at <= now())
	  AND o.id NOT IN (SELECT unnest(l.ids) FROM %[2]s AS l)`+head+`
	ORDER BY o.id
	LIMIT $1
), j AS (
	INSERT INTO %[2]s (ids, expires_at)
	SELECT array_agg(c.id), now() + $2::bigint * interval '1 microsecond' FROM c HAVING count(*) > 0
)
SELECT * FROM c`, table, lease, q.dataColumns, nextAttempt("o.retry_count"))
		l.claim[i] = payloadParam(l.claim[i], claimPayloadParam(i))
	}
	q.lease = l

	// Every settling statement first takes the ids it will settle (those
	// that pass the fence in its snapshot, the same ones its DML changes)
	// out of their lease, in the same statement.
	settled := func(args string) string {
		return fmt.Sprintf(`WITH f AS (
	SELECT o.id FROM %[1]s AS o JOIN %[3]s ON o.id = a.id
	WHERE %[4]s = a.attempt - 1 AND o.status = 0
), l AS (
	UPDATE %[2]s AS l SET ids = ARRAY(SELECT x FROM unnest(l.ids) AS x WHERE x NOT IN (SELECT id FROM f))
	WHERE l.ids && ARRAY(SELECT id FROM f)
)
`, table, lease, args, counted("o.retry_count"))
	}
	d := buildDeferred(table, lastErr, async)
	q.ack = settled(argsFence) + d.ack
	q.del = settled(argsFence) + d.del
	q.reschedule = settled(argsRetry) + d.reschedule
	q.kill = settled(argsKill) + d.kill
}

// The row sets of the settling statements' parameters.
const (
	argsFence = "unnest($1::bigint[], $2::integer[]) AS a(id, attempt)"
	argsKill  = "unnest($1::bigint[], $2::integer[], $3::text[]) AS a(id, attempt, err)"
	argsRetry = "unnest($1::bigint[], $2::integer[], $3::timestamptz[], $4::text[]) AS a(id, attempt, at, err)"
)

// deferredQueries settle rows whose claim did not count the attempt (batch
// leases, held claims): they are fenced by retry_count = attempt - 1 and
// write the attempt, and take the same parameters as the queries' ack, del,
// reschedule and kill.
type deferredQueries struct {
	ack, del, reschedule, kill string
}

func buildDeferred(table, lastErr, async string) deferredQueries {
	fence := "o.id = a.id AND " + counted("o.retry_count") + " = a.attempt - 1 AND o.status = 0" + async
	return deferredQueries{
		ack: fmt.Sprintf(`UPDATE %s AS o SET status = 1, retry_count = a.attempt, updated_at = now()
FROM %s
WHERE %s`, table, argsFence, fence),
		del: fmt.Sprintf(`DELETE FROM %s AS o
USING %s
WHERE %s`, table, argsFence, fence),
		reschedule: fmt.Sprintf(`UPDATE %s AS o
SET next_retry_at = a.at, retry_count = a.attempt - $5::integer, updated_at = now()%s
FROM %s
WHERE %s`, table, lastErr, argsRetry, fence),
		kill: fmt.Sprintf(`UPDATE %s AS o SET status = 2, retry_count = a.attempt, updated_at = now()%s
FROM %s
WHERE %s`, table, lastErr, argsKill, fence),
	}
}

// batchLeaseClaimer claims with a batch lease, in one round trip: a
// transaction that waits its turn, recovers expired leases, and claims. An
// unordered claim starts at the claim cursor; when that comes back short, a
// second batch lease takes the rest from the first due row.
type batchLeaseClaimer struct{ s *Store }

func (b batchLeaseClaimer) claim(ctx context.Context, q *queries, p outbox.ClaimParams) (*outbox.Claim, error) {
	s := b.s
	if p.Ordered {
		mode := claimOrdered
		if p.BlockOnDead {
			mode = claimOrderedBlockOnDead
		}
		return s.leaseBatch(ctx, q, p, mode, p.Limit)
	}
	return s.fromCursor(&s.claimCursor, p.Limit, func(limit int, lo, hi int64) (*outbox.Claim, error) {
		return s.leaseBatch(ctx, q, p, claimUnordered, limit, lo, hi)
	})
}

// leaseBatch claims up to limit rows under one batch lease, with the claim
// statement of mode (and, unordered, the range of ids (lo, hi] in ids).
func (s *Store) leaseBatch(ctx context.Context, q *queries, p outbox.ClaimParams, mode, limit int,
	ids ...any) (*outbox.Claim, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if s.cfg.asyncCommit {
		b.Queue("SET LOCAL synchronous_commit = off")
	}
	b.Queue("SELECT pg_advisory_xact_lock($1)", q.lease.lockKey)
	b.Queue(q.lease.recover)
	mp := payloadLimit(p.MaxPayload)
	b.Queue(q.lease.claim[mode], append(append([]any{limit, p.Lease.Microseconds()}, ids...), mp)...)
	b.Queue("COMMIT")
	br := s.pool.SendBatch(ctx, b)
	claim, err := scanClaim(br, q, mp, b.Len()-2) // the claim, then COMMIT
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
			return nil, fmt.Errorf("pgstore: claim: %w (WithBatchLease needs its table: run Migrate with WithBatchLease)", err)
		}
		return nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	sortClaim(claim)
	return claim, nil
}

// scanClaim reads the next results of br: skip statements, then a claim's
// rows, read with the payload limit maxPayload.
func scanClaim(br pgx.BatchResults, q *queries, maxPayload int32, skip int) (*outbox.Claim, error) {
	for range skip {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	claim := &outbox.Claim{}
	return claim, scanClaimRows(rows, q, maxPayload, claim)
}

// scanClaimRows reads a claim statement's rows, read with the payload limit
// maxPayload, into claim, and closes them. With flags, every row ends with
// those columns, scanned into flags, and a row whose id is NULL carries
// only the flags.
func scanClaimRows(rows pgx.Rows, q *queries, maxPayload int32, claim *outbox.Claim, flags ...any) error {
	defer rows.Close()
	var r claimedRow
	dest := r.dest(q, maxPayload)
	var id pgtype.Int8
	var attempt pgtype.Int4
	if len(flags) > 0 { // the flag row has NULL in every claimed column
		dest[0], dest[1] = &id, &attempt
		dest = append(dest, flags...)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("read row: %w", err)
		}
		if len(flags) > 0 {
			if !id.Valid {
				continue // no row claimed: only the flags
			}
			r.id, r.attempt = id.Int64, attempt.Int32
		}
		m, err := r.message()
		if err != nil {
			claim.Malformed = append(claim.Malformed, outbox.MalformedRow{Message: m, Err: err})
			continue
		}
		claim.Messages = append(claim.Messages, m)
	}
	rows.Close()
	return rows.Err()
}
