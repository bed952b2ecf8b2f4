package outbox

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// DefaultMaxPayloadSize is the largest payload the Writer and the relay accept
// by default: 1 MiB less 16 KiB, so that a message at the limit still fits
// NATS's default max_payload of 1 MiB, which counts the headers too. Kafka's
// default record limit is also about 1 MB; raise it (and the broker's) for
// larger messages.
const DefaultMaxPayloadSize = 1<<20 - 16<<10

// TxInserter adds messages to the caller's open transaction. TTx is the
// caller's transaction type (pgx.Tx, *sql.Tx). Stores implement it.
type TxInserter[TTx any] interface {
	// InsertTx inserts msgs, already validated, in tx. It must not commit or
	// roll back tx.
	InsertTx(ctx context.Context, tx TTx, msgs []*Message) error
}

// TxDeleter deletes messages' rows in the caller's open transaction; stores
// implement it so that a Writer can use [WithDeleteAfterInsert].
type TxDeleter[TTx any] interface {
	// DeleteTx deletes the rows of msgs (by MessageID) in tx. It must not
	// commit or roll back tx.
	DeleteTx(ctx context.Context, tx TTx, msgs []*Message) error
}

// Writer writes messages inside the caller's transaction: they become visible
// to relays when the transaction commits and vanish if it rolls back. A Writer
// is safe for concurrent use.
type Writer[TTx any] struct {
	ins TxInserter[TTx]
	del TxDeleter[TTx] // with WithDeleteAfterInsert
	cfg writerConfig
}

type writerConfig struct {
	maxPayload        int
	deleteAfterInsert bool
}

// WriterOption configures a [Writer]. Its options are named
// WithWriter<Setting> (see [RelayOption]).
type WriterOption func(*writerConfig)

// WithWriterMaxPayloadSize sets the largest payload, in bytes, that Write
// accepts; 0 or less means no limit. (The relay's own limit, for rows other
// programs write, is [WithMaxPayloadSize].) Default: DefaultMaxPayloadSize
// (1 MiB).
func WithWriterMaxPayloadSize(n int) WriterOption { return func(c *writerConfig) { c.maxPayload = n } }

// WithDeleteAfterInsert makes Write delete the rows it inserted, in the same
// transaction: the table stays empty and each message exists only in the
// database's log, for a change-data-capture relay (store/pgcdc) to read, as
// Debezium's outbox does. A polling relay never sees such messages, and if
// the replication slot is lost they are lost with it (docs/cdc.md). The
// store must implement [TxDeleter]. Default: off (rows are kept).
func WithDeleteAfterInsert() WriterOption {
	return func(c *writerConfig) { c.deleteAfterInsert = true }
}

// NewWriter returns a Writer that inserts through ins (a store). It panics if
// ins is nil, or with WithDeleteAfterInsert if ins is not a [TxDeleter]:
// programmer errors.
func NewWriter[TTx any](ins TxInserter[TTx], opts ...WriterOption) *Writer[TTx] {
	if ins == nil {
		panic("outbox: NewWriter with a nil TxInserter")
	}
	cfg := writerConfig{maxPayload: DefaultMaxPayloadSize}
	for _, o := range opts {
		o(&cfg)
	}
	w := &Writer[TTx]{ins: ins, cfg: cfg}
	if cfg.deleteAfterInsert {
		d, ok := ins.(TxDeleter[TTx])
		if !ok {
			panic(fmt.Sprintf("outbox: WithDeleteAfterInsert with %T, which cannot delete (no DeleteTx)", ins))
		}
		w.del = d
	}
	return w
}

// Write validates msgs and inserts them in tx. It fills an empty MessageID with
// a new UUIDv7 and records the W3C trace context (traceparent, tracestate) of
// ctx in the headers when ctx carries a sampled or unsampled span and the
// caller did not set one. A message whose ExpiresAt is already past, or
// whose DeliverAt is not before its ExpiresAt, is invalid: it could never be
// published. When any message is invalid, Write returns a
// *ValidationError (matching ErrInvalidMessage) before touching tx, so the
// caller's transaction is left as it was.
func (w *Writer[TTx]) Write(ctx context.Context, tx TTx, msgs ...*Message) error {
	if len(msgs) == 0 {
		return nil
	}
	now := time.Now()
	for i, m := range msgs {
		if err := m.validate(i, w.cfg.maxPayload, now); err != nil {
			return err
		}
	}
	sc := trace.SpanContextFromContext(ctx)
	for _, m := range msgs {
		if m.MessageID == "" {
			m.MessageID = NewMessageID()
		}
		if sc.IsValid() {
			recordTraceContext(m, sc)
		}
	}
	if err := w.ins.InsertTx(ctx, tx, msgs); err != nil {
		return fmt.Errorf("outbox: write %d messages: %w", len(msgs), err)
	}
	if w.del != nil {
		if err := w.del.DeleteTx(ctx, tx, msgs); err != nil {
			return fmt.Errorf("outbox: write %d messages: delete after insert: %w", len(msgs), err)
		}
	}
	return nil
}

// recordTraceContext adds traceparent (and tracestate) for sc unless the
// caller's headers already hold a traceparent.
func recordTraceContext(m *Message, sc trace.SpanContext) {
	if _, ok := m.Headers[HeaderTraceparent]; ok {
		return
	}
	h := make(map[string]string, len(m.Headers)+2)
	for k, v := range m.Headers {
		h[k] = v
	}
	h[HeaderTraceparent] = fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
	if ts := sc.TraceState().String(); ts != "" {
		h[HeaderTracestate] = ts
	}
	m.Headers = h
}
