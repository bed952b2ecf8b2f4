package benchcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
)

// Names of the relays in the report.
const (
	relayOutbox    = "outbox"
	relayTextbook  = "textbook"
	relayReference = "reference"
)

// runner is a relay loop: outbox.Relay, the textbook relay or the reference loop.
type runner interface {
	Run(ctx context.Context) error
}

// recording wraps the publisher of a test: it counts what the broker
// confirmed and tells the test when.
type recording struct {
	outbox.Publisher
	confirmed atomic.Int64
	onAck     func(msgs []*outbox.Message, errs []error, at time.Time) // may be nil
}

func (r *recording) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	errs := r.Publisher.Publish(ctx, msgs)
	at := time.Now()
	var ok int64
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	r.confirmed.Add(ok)
	if r.onAck != nil {
		r.onAck(msgs, errs, at)
	}
	return errs
}

// outboxRelays returns the library's relays with the run's settings, each
// with a store from newStore.
func outboxRelays(cfg Config, newStore func() (outbox.Store, error), pub outbox.Publisher) ([]runner, error) {
	opts := []outbox.RelayOption{
		outbox.WithPollInterval(cfg.PollInterval),
		outbox.WithDeleteSent(cfg.DeleteSent),
		outbox.WithOrdering(cfg.Ordering, outbox.DeadBlocks),
	}
	if !cfg.librarySizing {
		opts = append(opts, outbox.WithBatchSize(cfg.BatchSize), outbox.WithMaxInFlight(cfg.MaxInFlight))
	}
	if cfg.Adaptive {
		opts = append(opts, outbox.WithBatchSizeRange(outbox.DefaultMinBatchSize, cfg.BatchSize),
			outbox.WithMaxInFlightRange(outbox.DefaultMinInFlight, cfg.MaxInFlight))
	}
	if cfg.NoSlots {
		opts = append(opts, outbox.WithRelayTTL(0))
	}
	if cfg.MinPollInterval > 0 {
		opts = append(opts, outbox.WithMinPollInterval(cfg.MinPollInterval))
	}
	if cfg.Logger != nil {
		opts = append(opts, outbox.WithLogger(cfg.Logger))
	}
	rs := make([]runner, cfg.Relays)
	for i := range rs {
		st, err := newStore()
		if err != nil {
			return nil, err
		}
		r, err := outbox.NewRelay(st, pub, append(opts, outbox.WithName(fmt.Sprintf("bench-%d", i+1)))...)
		if err != nil {
			return nil, err
		}
		rs[i] = r
	}
	return rs, nil
}

// The textbook relay's settings: what most outbox tutorials and many
// hand-written relays do.
const (
	textbookInterval = time.Second // fixed delay between polls
	textbookBatch    = 100
	textbookTimeout  = 3 * time.Second // per publish
)

// textbook is the relay of the tutorials, as a baseline: every second
// (fixed delay, whatever it found), select up to 100 pending rows, publish
// them one at a time, waiting for each acknowledgement, and mark each one
// sent with its own UPDATE. It takes no lease and no lock, so only one may
// run on a table.
type textbook struct {
	db  *database
	pub outbox.Publisher
}

func (t *textbook) Run(ctx context.Context) error {
	sel := fmt.Sprintf(`SELECT id, message_id, aggregate_type, aggregate_id, event_type, %s
FROM %s WHERE status = 0 ORDER BY id LIMIT %d`, t.db.payloadText, t.db.table, textbookBatch)
	upd := fmt.Sprintf("UPDATE %s SET status = 1 WHERE id = %s", t.db.table, t.db.bind)
	for {
		_ = t.cycle(ctx, sel, upd) // the tutorials log and carry on
		timer := time.NewTimer(textbookInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
	}
}

// cycle is one poll: select, then publish and update row by row.
func (t *textbook) cycle(ctx context.Context, sel, upd string) error {
	rows, err := t.db.sqlDB.QueryContext(ctx, sel)
	if err != nil {
		return err
	}
	var batch []*outbox.Message
	for rows.Next() {
		m := &outbox.Message{}
		var payload string
		if err := rows.Scan(&m.RowID, &m.MessageID, &m.AggregateType, &m.AggregateID, &m.EventType, &payload); err != nil {
			rows.Close()
			return err
		}
		m.Payload = json.RawMessage(payload)
		batch = append(batch, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, m := range batch {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pctx, cancel := context.WithTimeout(ctx, textbookTimeout)
		errs := t.pub.Publish(pctx, []*outbox.Message{m})
		cancel()
		if errs[0] != nil {
			continue // tried again at the next poll
		}
		if _, err := t.db.sqlDB.ExecContext(ctx, upd, m.RowID); err != nil {
			return err
		}
	}
	return nil
}

// referenceIdle is how long the reference loop waits after a statement
// that found nothing pending.
const referenceIdle = 2 * time.Millisecond

// reference is the reference loop of the drain test (Config.Reference): the
// least database work per message a relay can do, one batch at a time, as a
// yardstick of the database, broker and machine under test. In a loop, one
// statement deletes a batch of pending rows (or marks it sent) and returns
// it, and then the whole batch is published at once and its
// acknowledgements awaited. It is not a relay to use: a crash between the
// statement and the acknowledgements loses the batch, and a message the
// broker refuses is gone. PostgreSQL only (DELETE … RETURNING with SKIP
// LOCKED, so that several loops can share the table).
type reference struct {
	pool *pgxpool.Pool
	stmt string
	pub  outbox.Publisher
}

// newReference returns a reference loop on the run's table: batches of
// batch rows, deleted or marked sent.
func newReference(d *database, pub outbox.Publisher, batch int, deleteSent bool) *reference {
	pick := fmt.Sprintf("SELECT id FROM %s WHERE status = 0 ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED", d.table, batch)
	stmt := fmt.Sprintf("UPDATE %s SET status = 1 WHERE id IN (%s)", d.table, pick)
	if deleteSent {
		stmt = fmt.Sprintf("DELETE FROM %s WHERE id IN (%s)", d.table, pick)
	}
	stmt += " RETURNING id, message_id, aggregate_type, aggregate_id, event_type, payload, headers"
	return &reference{pool: d.pool, stmt: stmt, pub: pub}
}

func (r *reference) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		msgs, err := r.take(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("reference loop: %w", err)
		}
		if len(msgs) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(referenceIdle):
			}
			continue
		}
		r.pub.Publish(ctx, msgs) // the recording counts what the broker confirmed; the rest is lost
	}
	return nil
}

// take runs the statement and returns the rows it took.
func (r *reference) take(ctx context.Context) ([]*outbox.Message, error) {
	rows, err := r.pool.Query(ctx, r.stmt)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var msgs []*outbox.Message
	for rows.Next() {
		m := &outbox.Message{}
		var headers []byte
		if err := rows.Scan(&m.RowID, &m.MessageID, &m.AggregateType, &m.AggregateID, &m.EventType, &m.Payload,
			&headers); err != nil {
			return nil, err
		}
		if len(headers) > 0 && string(headers) != "null" {
			if err := json.Unmarshal(headers, &m.Headers); err != nil {
				return nil, fmt.Errorf("row %d: headers: %w", m.RowID, err)
			}
		}
		msgs = append(msgs, m)
	}
	return msgs, rows.Err()
}
