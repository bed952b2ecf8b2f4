package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
)

// shipping is the shipping service of one path. It consumes the path's
// stream over its own connection (not through the fault proxy: the outage is
// between the payment service and the broker) and ships each order once,
// through an [inbox.Inbox] that absorbs duplicate deliveries by message id.
type shipping struct {
	db    *sql.DB
	d     dialect
	t     serviceTables
	inbox *inbox.Inbox
	cons  jetstream.Consumer
	log   *slog.Logger
	start time.Time // of the run, for lastShipment

	shipped  atomic.Int64 // messages processed for the first time
	absorbed atomic.Int64 // deliveries the inbox found already processed
	lastShip atomic.Int64 // when the last shipment was made, in ns since start

	mu        sync.Mutex
	delivered map[string]bool // message ids delivered so far
	dupSeen   int             // deliveries of a message id delivered before
}

// shippingWorkers is how many messages a shipping service processes at once.
const shippingWorkers = 4

// run consumes the stream until ctx ends, handing each delivery to one of
// shippingWorkers goroutines, all owned by wg.
func (s *shipping) run(ctx context.Context, wg *sync.WaitGroup) error {
	deliveries := make(chan jetstream.Msg)
	cc, err := s.cons.Consume(func(m jetstream.Msg) {
		select {
		case deliveries <- m:
		case <-ctx.Done(): // not acknowledged: the stream keeps it
		}
	}, jetstream.PullMaxMessages(64))
	if err != nil {
		return err
	}
	wg.Go(func() {
		<-ctx.Done()
		cc.Stop()
		<-cc.Closed()
	})
	for range shippingWorkers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-deliveries:
					s.handle(ctx, m)
				}
			}
		})
	}
	return nil
}

// shipmentPayload is the body every path publishes.
type shipmentPayload struct {
	OrderID int64 `json:"order_id"`
}

// handle processes one delivery and acknowledges it once the inbox's
// transaction committed (or found a duplicate); a failure asks for
// redelivery. It is safe for concurrent use.
func (s *shipping) handle(ctx context.Context, m jetstream.Msg) {
	msg, orderID, err := decodeDelivery(m)
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "undecodable shipment message", slog.String("error", err.Error()))
		_ = m.Term()
		return
	}
	s.mu.Lock()
	if s.delivered[msg.MessageID] {
		s.dupSeen++
	}
	s.delivered[msg.MessageID] = true
	s.mu.Unlock()

	out, err := s.inbox.Process(ctx, msg, func(ctx context.Context, tx *sql.Tx, msg *outbox.Message) error {
		return recordShipment(ctx, tx, s.d, s.t, orderID, msg.MessageID)
	})
	if err != nil {
		if ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "shipment failed, asking for redelivery",
				slog.String("message_id", msg.MessageID), slog.String("error", err.Error()))
		}
		_ = m.NakWithDelay(100 * time.Millisecond)
		return
	}
	switch out {
	case inbox.Processed:
		s.shipped.Add(1)
		s.shippedAt(time.Since(s.start))
	case inbox.Duplicate:
		s.absorbed.Add(1)
	}
	_ = m.Ack()
}

// shippedAt records a shipment made at d, keeping the latest.
func (s *shipping) shippedAt(d time.Duration) {
	for {
		last := s.lastShip.Load()
		if last >= int64(d) || s.lastShip.CompareAndSwap(last, int64(d)) {
			return
		}
	}
}

// decodeDelivery reads the message id (the outbox header, else Nats-Msg-Id)
// and the order id of a delivery.
func decodeDelivery(m jetstream.Msg) (*outbox.Message, int64, error) {
	h := m.Headers()
	id := h.Get(outbox.HeaderMessageID)
	if id == "" {
		id = h.Get(jetstream.MsgIDHeader)
	}
	if id == "" {
		return nil, 0, errors.New("no message id header")
	}
	var p shipmentPayload
	if err := json.Unmarshal(m.Data(), &p); err != nil || p.OrderID <= 0 {
		return nil, 0, fmt.Errorf("message %s: payload has no order id", id)
	}
	return &outbox.Message{
		MessageID:     id,
		AggregateType: h.Get(outbox.HeaderAggregateType),
		AggregateID:   h.Get(outbox.HeaderAggregateID),
		EventType:     h.Get(outbox.HeaderEventType),
		Payload:       m.Data(),
	}, p.OrderID, nil
}

// duplicatesSeen returns how many deliveries repeated a message id that had
// been delivered before.
func (s *shipping) duplicatesSeen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dupSeen
}

// caughtUp reports whether the shipping service has processed and
// acknowledged everything in its stream.
func (s *shipping) caughtUp(ctx context.Context) (bool, error) {
	info, err := s.cons.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("shipping consumer info: %w", err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0, nil
}
