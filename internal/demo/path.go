package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/pgcdc"
)

// pathKind is one way of writing the payment service's code.
type pathKind int

const (
	// naive commits, then publishes: the code of the incident.
	naive pathKind = iota
	// publishFirst publishes, then commits: the "fix" that makes ghosts.
	publishFirst
	// viaOutbox writes the order and the message in one transaction; a relay publishes.
	viaOutbox
)

// pathKinds lists the paths in the order of the table's columns.
var pathKinds = [...]pathKind{naive, publishFirst, viaOutbox}

// key names the path in table names, streams, logs and Summary.
func (k pathKind) key() string {
	return [...]string{"naive", "publish-first", "outbox"}[k]
}

// ident is key as a SQL identifier and a NATS subject token.
func (k pathKind) ident() string {
	return [...]string{"naive", "pubfirst", "outbox"}[k]
}

// title is the path's column heading.
func (k pathKind) title() string {
	return [...]string{"commit, then publish", "publish, then commit", "outbox"}[k]
}

// eventType is the event every path sends when an order is paid.
const eventType = "ORDER_PAID"

// errDeclined ends a payment whose transaction rolled back because the card
// processor declined it: the business outcome, not a failure of the code.
var errDeclined = errors.New("payment declined")

// retryPause is how long the hand-written paths wait before their one retry.
const retryPause = 100 * time.Millisecond

// path is one payment service and its shipping service, with its own tables
// and stream.
type path struct {
	kind    pathKind
	db      *sql.DB
	d       dialect
	t       serviceTables
	stream  string
	subject string
	log     *slog.Logger

	js jetstream.JetStream // through the fault proxy: the hand-written paths

	writer *outbox.Writer[*sql.Tx] // the outbox path
	store  outbox.Store
	relay  *outbox.Relay
	cdc    *pgcdc.Source // with Config.CDC: reads the stream beside the relay

	ship *shipping

	paid          atomic.Int64 // transactions that committed an order as paid
	failedAttempt atomic.Int64 // publish attempts that failed (the relay's, per message)
	lost          atomic.Int64 // naive: messages given up after the retry
	relaySent     atomic.Int64 // outbox: messages the relay published and acknowledged
}

// message returns the event for a paid order.
func (p *path) message(orderID int) *outbox.Message {
	return &outbox.Message{
		AggregateType: "order",
		AggregateID:   strconv.Itoa(orderID),
		EventType:     eventType,
		Topic:         p.subject,
		Payload:       []byte(`{"order_id":` + strconv.Itoa(orderID) + `}`),
	}
}

// pay runs the path's payment code for one order.
func (p *path) pay(ctx context.Context, orderID int, declined bool) {
	var err error
	switch p.kind {
	case naive:
		err = p.payNaive(ctx, orderID, declined)
	case publishFirst:
		err = p.payPublishFirst(ctx, orderID, declined)
	case viaOutbox:
		err = p.payOutbox(ctx, orderID, declined)
	}
	if err != nil && !errors.Is(err, errDeclined) && ctx.Err() == nil {
		p.log.LogAttrs(ctx, slog.LevelError, "payment failed",
			slog.Int("order_id", orderID), slog.String("error", err.Error()))
	}
}

// payNaive is the incident's code: mark the order paid and commit, then
// publish straight to the broker; on failure retry once, then log the error
// and move on. The message is lost, the order stays paid.
func (p *path) payNaive(ctx context.Context, orderID int, declined bool) error {
	if err := p.commitPaid(ctx, orderID, declined, nil); err != nil {
		return err
	}
	m := p.message(orderID)
	m.MessageID = outbox.NewMessageID()
	if err := p.publishDirect(ctx, m); err != nil {
		p.lost.Add(1)
		p.log.LogAttrs(ctx, slog.LevelError, "order paid but its message could not be sent",
			slog.Int("order_id", orderID), slog.String("error", err.Error()))
	}
	return nil
}

// payPublishFirst publishes before it commits, so that a failed publish
// refuses the payment instead of losing the message. When the transaction
// then rolls back, the message is already out: a ghost.
func (p *path) payPublishFirst(ctx context.Context, orderID int, declined bool) error {
	m := p.message(orderID)
	m.MessageID = outbox.NewMessageID()
	if err := p.publishDirect(ctx, m); err != nil {
		return fmt.Errorf("payment refused, message not sent: %w", err)
	}
	return p.commitPaid(ctx, orderID, declined, nil)
}

// payOutbox writes the order and its message in one transaction, and
// wakes the relay once it committed.
func (p *path) payOutbox(ctx context.Context, orderID int, declined bool) error {
	err := p.commitPaid(ctx, orderID, declined, func(tx *sql.Tx) error {
		return p.writer.Write(ctx, tx, p.message(orderID))
	})
	if err != nil {
		return err
	}
	p.relay.Notify()
	return nil
}

// commitPaid marks the order paid in a transaction, runs also (when not nil)
// in the same transaction, and commits, or rolls back when declined.
func (p *path) commitPaid(ctx context.Context, orderID int, declined bool, also func(*sql.Tx) error) error {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := markPaid(ctx, tx, p.d, p.t, orderID); err != nil {
		return err
	}
	if also != nil {
		if err := also(tx); err != nil {
			return err
		}
	}
	if declined {
		return errDeclined // the deferred Rollback undoes the order (and its outbox row)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	p.paid.Add(1)
	return nil
}

// publishDirect publishes m to JetStream the way hand-written code does:
// one request with PublishTimeout, and one retry after a short pause. It
// sends the message id in a header for the consumer but, like most such
// code, no Nats-Msg-Id, so the broker cannot drop a retried copy.
func (p *path) publishDirect(ctx context.Context, m *outbox.Message) error {
	nm := nats.NewMsg(m.Topic)
	for k, v := range m.StandardHeaders() {
		nm.Header.Set(k, v)
	}
	nm.Data = m.Payload
	var err error
	for attempt := 1; attempt <= 2; attempt++ {
		if attempt > 1 && !pause(ctx, retryPause) {
			return ctx.Err()
		}
		pctx, cancel := context.WithTimeout(ctx, PublishTimeout)
		_, err = p.js.PublishMsg(pctx, nm)
		cancel()
		if err == nil {
			return nil
		}
		p.failedAttempt.Add(1)
	}
	return err
}

// pause waits for d and reports true, or for ctx and reports false.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// OnMessage counts the relay's results ([outbox.HookMessage]).
func (p *path) OnMessage(ev outbox.MessageEvent) {
	switch ev.Result {
	case outbox.ResultSent:
		p.relaySent.Add(1)
	case outbox.ResultRetry, outbox.ResultUnavailable, outbox.ResultDead:
		p.failedAttempt.Add(1)
	}
}
