package amqppub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
)

// returnBuffer is how many basic.return frames a channel holds before the
// connection's reader would wait for Publish to read them.
const returnBuffer = 256

// closeReasonWait bounds the wait for the reason of a channel closed by the broker.
const closeReasonWait = time.Second

// pubChannel is a confirm-mode channel with its notifications.
type pubChannel struct {
	conn    *amqp.Connection
	gen     uint64
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error

	mu     sync.Mutex
	reason *amqp.Error // why the broker closed the channel, once known
}

func openChannel(conn *amqp.Connection, gen uint64) (*pubChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	return &pubChannel{
		conn:    conn,
		gen:     gen,
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, returnBuffer)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

// closeReason returns the broker's reason for closing the channel, or nil
// when it is open or was closed without one. amqp091 marks the channel
// closed a moment before it hands out the reason, so a closed channel is
// given up to closeReasonWait to deliver it.
func (pc *pubChannel) closeReason() *amqp.Error {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.reason != nil || !pc.ch.IsClosed() {
		return pc.reason
	}
	t := time.NewTimer(closeReasonWait)
	defer t.Stop()
	select {
	case e, ok := <-pc.closes:
		if ok && e != nil {
			pc.reason = e
		}
	case <-t.C:
	}
	return pc.reason
}

// acquire takes a free channel slot and an idle channel of the current
// connection, or opens one, within ctx.
func (p *Publisher) acquire(ctx context.Context) (*pubChannel, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("amqppub: wait for a free channel: %w", ctx.Err())
	}
	pc, err := p.takeOrOpen(ctx)
	if err != nil {
		<-p.sem
		return nil, err
	}
	return pc, nil
}

func (p *Publisher) takeOrOpen(ctx context.Context) (*pubChannel, error) {
	conn, gen, err := p.connection(ctx)
	if err != nil {
		return nil, outbox.Unavailable(fmt.Errorf("amqppub: %w", err))
	}
	p.mu.Lock()
	for len(p.idle) > 0 {
		pc := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if pc.gen == gen && !pc.ch.IsClosed() {
			p.mu.Unlock()
			return pc, nil
		}
		p.wg.Go(func() { _ = pc.ch.Close() })
	}
	p.mu.Unlock()

	type opened struct {
		pc  *pubChannel
		err error
	}
	result := make(chan opened)
	// Opening is two round trips without a context: bound them by ctx and,
	// when ctx wins, close the channel once it opens.
	p.wg.Go(func() {
		pc, err := openChannel(conn, gen)
		select {
		case result <- opened{pc, err}:
		case <-ctx.Done():
			if pc != nil {
				_ = pc.ch.Close()
			}
		}
	})
	select {
	case r := <-result:
		if r.err != nil {
			err := fmt.Errorf("amqppub: open channel: %w", r.err)
			// Opening a channel on a closed connection fails with ErrClosed.
			if connectionGone(conn, r.err) || errors.Is(r.err, amqp.ErrClosed) {
				return nil, outbox.Unavailable(err)
			}
			return nil, err
		}
		return r.pc, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("amqppub: open channel: %w", ctx.Err())
	}
}

// release gives pc's slot back, keeping pc for the next batch when healthy
// and still on the current connection, closing it otherwise.
func (p *Publisher) release(pc *pubChannel, healthy bool) {
	p.mu.Lock()
	keep := healthy && !pc.ch.IsClosed() && pc.gen == p.state.gen && !p.state.closed
	if keep {
		p.idle = append(p.idle, pc)
	}
	p.mu.Unlock()
	<-p.sem
	if !keep {
		// A round trip that lasts as long as a silent connection does; the
		// slot is free already.
		_ = pc.ch.Close() // a no-op when already closed
	}
}
