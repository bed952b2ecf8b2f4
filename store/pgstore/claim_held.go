package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
)

// Held claims (WithHeldClaims).
//
// A held claim locks its rows in a transaction that stays open while the
// relay publishes them, and settles them in that transaction:
//
//	BEGIN
//	SET LOCAL idle_in_transaction_session_timeout = the lease
//	SELECT the first due rows ... FOR UPDATE SKIP LOCKED
//	(the relay publishes the batch and waits for the broker)
//	DELETE (or mark sent) the sent rows, reschedule or kill the others
//	COMMIT
//
// A batch costs two round trips and one commit, and each row is written once
// (deleted or marked sent; a retry or a death is the one write of its row);
// with row leases a row is written twice (the lease, then the ack), with new
// index entries each time, and a batch costs two commits. Other claims skip
// the locked rows, as they skip leased ones, and since the rows stay locked
// until the commit, no other relay can take them in between, whatever
// happens to the batch. The lease of the claim bounds how long the
// transaction may sit idle: a relay that stops settling (paused, cut off)
// has its session ended by the server once the lease is over, and its rows
// are pending again, as a lease that ran out would leave them.
//
// The claim reads retry_count and counts the attempt only in what it hands
// out; settling writes it. The sent rows are acknowledged by id alone, since
// the transaction holds them; retries and deaths use the statements of batch
// leases (fenced by retry_count = attempt - 1, writing the attempt).
//
// If the relay, its connection or the database dies before COMMIT, the
// transaction rolls back and the rows are pending as before the claim, to be
// published again (at-least-once, duplicates bounded by the batches in
// flight). Unlike leases, the attempt is not counted then, so a message that
// crashes the relay process every time is never marked dead.

// heldQueries are the statements of held claims.
type heldQueries struct {
	due   string // whether any row is due, without locking
	claim string // $1 limit, ids in ($2, $3], $4 payload limit
	// claimStatus is claim on a table without the pending index
	// (indexes.go): the same parameters, read from the (status,
	// next_retry_at) index, the due rows first, then those never claimed.
	claimStatus string
	ack, del    string // $1 ids: the claim holds their rows, so no fence
	deferred    deferredQueries
}

func buildHeldQueries(table, dataColumns, lastErr, async string) *heldQueries {
	return &heldQueries{
		// Two ranges of the (status, next_retry_at) index, so that the
		// question never walks the sent rows (indexes.go).
		due: fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %[1]s AS o WHERE o.status = 0 AND o.next_retry_at <= now())
	OR EXISTS (SELECT 1 FROM %[1]s AS o WHERE o.status = 0 AND o.next_retry_at IS NULL)`, table),
		claim: fmt.Sprintf(`SELECT o.id, %s, %s
FROM %s AS o
WHERE o.status = 0 AND (o.next_retry_at IS NULL OR o.next_retry_at <= now()) AND o.id > $2 AND o.id <= $3%s
ORDER BY o.id
LIMIT $1
FOR UPDATE SKIP LOCKED`, nextAttempt("o.retry_count"), payloadParam(dataColumns, 4), table, async),
		claimStatus: fmt.Sprintf(`WITH due AS (
	SELECT o.id, %[1]s AS attempt, %[2]s
	FROM %[3]s AS o
	WHERE o.status = 0 AND o.next_retry_at <= now() AND o.id > $2 AND o.id <= $3%[4]s
	ORDER BY o.status, o.next_retry_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
), fresh AS (
	SELECT o.id, %[1]s AS attempt, %[2]s
	FROM %[3]s AS o
	WHERE o.status = 0 AND o.next_retry_at IS NULL AND o.id > $2 AND o.id <= $3
	ORDER BY o.status, o.next_retry_at
	LIMIT (SELECT $1 - count(*) FROM due)
	FOR UPDATE SKIP LOCKED
)
SELECT * FROM due UNION ALL SELECT * FROM fresh`, nextAttempt("o.retry_count"), payloadParam(dataColumns, 4), table, async),
		ack: fmt.Sprintf(`UPDATE %s AS o SET status = 1, retry_count = %s, updated_at = now()
WHERE o.id = ANY($1::bigint[])`, table, nextAttempt("o.retry_count")),
		del:      fmt.Sprintf(`DELETE FROM %s AS o WHERE o.id = ANY($1::bigint[])`, table),
		deferred: buildDeferred(table, lastErr, async),
	}
}

// heldClaimer claims in a transaction that it leaves open, in one round
// trip, and returns the claim with the transaction in Claim.Held. A claim
// that finds nothing ends its transaction. After a claim that found
// nothing (and before the first), the next one first asks whether any row
// is due, without a transaction, so that an idle relay costs one query per
// poll. Ordered claims are not held: they lease rows.
type heldClaimer struct {
	*rowLeaseClaimer
	found atomic.Bool // the last held claim found rows
}

func (h *heldClaimer) claim(ctx context.Context, q *queries, p outbox.ClaimParams) (*outbox.Claim, error) {
	if p.Ordered {
		return h.rowLeaseClaimer.claim(ctx, q, p)
	}
	if err := h.checkNoBatchLeases(ctx); err != nil {
		return nil, err
	}
	if !h.found.Load() {
		var due bool
		if err := h.s.pool.QueryRow(ctx, q.held.due).Scan(&due); err != nil {
			return nil, fmt.Errorf("pgstore: claim: %w", err)
		}
		if !due {
			return &outbox.Claim{}, nil
		}
	}
	claim, err := h.s.claimHeldTx(ctx, q, p)
	if err == nil {
		h.found.Store(claimSize(claim) > 0)
	}
	return claim, err
}

func (s *Store) claimHeldTx(ctx context.Context, q *queries, p outbox.ClaimParams) (*outbox.Claim, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	ix, err := s.indexesFor(ctx)
	if err != nil {
		conn.Release()
		return nil, err
	}
	sql, after := q.held.claimStatus, int64(0) // not in id order: no cursor
	if ix.pending {
		sql, after = q.held.claim, s.claimCursor.start(time.Now())
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(setIdleTimeout, idleTimeout(p.Lease))
	mp := payloadLimit(p.MaxPayload)
	b.Queue(sql, p.Limit, after, int64(math.MaxInt64), mp)
	br := conn.SendBatch(ctx, b)
	claim, err := scanClaim(br, q, mp, 2) // after BEGIN and the timeout
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil && after > 0 && claimSize(claim) < p.Limit {
		// Short from the cursor: take the rest from the first due row, up to
		// the cursor, in the same transaction.
		var rows pgx.Rows
		if rows, err = conn.Query(ctx, q.held.claim, p.Limit-claimSize(claim), int64(0), after, mp); err == nil {
			err = scanClaimRows(rows, q, mp, claim)
		}
	}
	if err == nil {
		s.claimCursor.claimed(after, claim, p.Limit)
	}
	if err != nil || claimSize(claim) == 0 {
		release(conn)
		if err != nil {
			return nil, fmt.Errorf("pgstore: claim: %w", err)
		}
		return claim, nil
	}
	sortClaim(claim)
	claim.Held = &heldClaim{q: q, conn: conn, delete: p.Delete}
	return claim, nil
}

// setIdleTimeout sets idle_in_transaction_session_timeout for the claim's
// transaction only: the held claim's lease. The transaction is idle while
// the relay publishes its batch, which the relay bounds by its publish
// timeout, at most half the lease. A relay that stops settling for longer
// (paused, cut off from the database, its host gone) has its session ended
// by the server, which rolls the transaction back: its rows are pending
// again, for other relays to take, and its late settle fails. Without it,
// the rows would stay locked until the server noticed the connection was
// gone, which can take hours.
const setIdleTimeout = "SELECT set_config('idle_in_transaction_session_timeout', $1, true)"

// idleTimeout is the setting's value for a lease, in milliseconds, within
// the setting's range.
func idleTimeout(lease time.Duration) string {
	return strconv.FormatInt(min(max(lease.Milliseconds(), 1), math.MaxInt32), 10)
}

// release ends the connection's transaction, if any, and gives it back to the
// pool. A connection that cannot roll back is closed by the pool, which rolls
// back on the server.
func release(conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		_, _ = conn.Exec(ctx, "ROLLBACK")
		cancel()
	}
	conn.Release()
}

// storeTimeout bounds the ROLLBACK of a held claim's transaction that is given up.
const storeTimeout = 5 * time.Second

// heldClaim is a claim's open transaction: an [outbox.HeldClaim].
type heldClaim struct {
	q      *queries
	conn   *pgxpool.Conn // nil once settled
	delete bool
}

// Settle acknowledges, reschedules and kills the batch's rows in the claim's
// transaction and commits it, in one round trip. It returns how many sent
// messages it acknowledged.
func (h *heldClaim) Settle(ctx context.Context, p outbox.SettleParams) (int, error) {
	conn := h.conn
	if conn == nil {
		return 0, errors.New("pgstore: settle: the claim was already settled")
	}
	h.conn = nil
	defer release(conn)

	d := h.q.held.deferred
	b := &pgx.Batch{}
	ack := -1 // the index of the ack in the batch
	if len(p.Sent) > 0 {
		ids, _, err := fenceArgs(p.Sent)
		if err != nil {
			return 0, fmt.Errorf("pgstore: settle: %w", err)
		}
		sql := h.q.held.ack
		if h.delete {
			sql = h.q.held.del
		}
		ack = b.Len()
		b.Queue(sql, ids)
	}
	for refund, rs := range [][]outbox.Retry{p.Retries, p.Refunds} {
		if len(rs) == 0 {
			continue
		}
		ids, attempts, ats, errs, err := retryArgs(rs)
		if err != nil {
			return 0, fmt.Errorf("pgstore: settle: %w", err)
		}
		b.Queue(d.reschedule, ids, attempts, ats, errs, refund)
	}
	if len(p.Dead) > 0 {
		ids, attempts, reasons, err := deadArgs(p.Dead)
		if err != nil {
			return 0, fmt.Errorf("pgstore: settle: %w", err)
		}
		b.Queue(d.kill, ids, attempts, reasons)
	}
	b.Queue("COMMIT")

	n := b.Len()
	br := conn.SendBatch(ctx, b)
	acked := 0
	var err error
	for i := range n {
		tag, e := br.Exec()
		if e != nil {
			err = e
			break
		}
		switch {
		case i == ack:
			acked = int(tag.RowsAffected())
		case i == n-1 && tag.String() != "COMMIT":
			err = fmt.Errorf("commit answered %q: the transaction was rolled back", tag.String())
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("pgstore: settle %d messages: %w", len(p.Sent)+len(p.Retries)+len(p.Refunds)+len(p.Dead), err)
	}
	return acked, nil
}
