package outboxtest

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
)

// MemoryStore is an outbox table held in memory, for examples and for unit
// tests of code around the relay (hooks, publishers, consumers) that need no
// database. It follows the store contract of [outbox.Store]: leases, the
// attempt count as fencing token, backoff, dead rows, delayed delivery
// (Message.DeliverAt is the row's first due time, ExpiresAt comes back with
// the claimed message for the relay to check) and ordered claims (a run of
// one row per aggregate, the head alone). Its transactions
// ([MemoryTx]) hold only its own rows, so it cannot commit a message with a
// business change: a service uses a real store, and tests that check the
// SQL the service runs use one too (store/sqlitestore needs no server).
type MemoryStore struct {
	mu     sync.Mutex
	rows   []*memRow // in id order
	nextID int64
	now    func() time.Time
}

// memRow is one row of a MemoryStore.
type memRow struct {
	msg       outbox.Message
	status    outbox.Status
	attempts  int
	due       time.Time // next_retry_at: zero means due now
	lastError string
	sentAt    time.Time
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{now: time.Now} }

// MemoryTx is a transaction of a [MemoryStore]: what the Writer inserts in it
// becomes visible to claims at Commit, and is dropped at Rollback.
type MemoryTx struct {
	store *MemoryStore
	msgs  []*outbox.Message
	done  bool
}

// ErrTxDone is returned by a [MemoryTx] used after Commit or Rollback.
var ErrTxDone = errors.New("outboxtest: transaction already committed or rolled back")

// Begin starts a transaction.
func (s *MemoryStore) Begin() *MemoryTx { return &MemoryTx{store: s} }

// Commit makes the transaction's messages pending rows, in write order.
func (tx *MemoryTx) Commit() error {
	if tx.done {
		return ErrTxDone
	}
	tx.done = true
	s := tx.store
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, m := range tx.msgs {
		s.nextID++
		r := &memRow{msg: *m, due: m.DeliverAt}
		r.msg.RowID, r.msg.CreatedAt, r.msg.Attempt = s.nextID, now, 0
		s.rows = append(s.rows, r)
	}
	return nil
}

// Rollback drops the transaction's messages.
func (tx *MemoryTx) Rollback() error {
	if tx.done {
		return ErrTxDone
	}
	tx.done, tx.msgs = true, nil
	return nil
}

// InsertTx adds msgs to tx, for [outbox.Writer].
func (s *MemoryStore) InsertTx(_ context.Context, tx *MemoryTx, msgs []*outbox.Message) error {
	if tx.done {
		return ErrTxDone
	}
	if tx.store != s {
		return errors.New("outboxtest: transaction of another MemoryStore")
	}
	for _, m := range msgs {
		c := *m
		c.Payload, c.Headers = slices.Clone(m.Payload), maps.Clone(m.Headers)
		tx.msgs = append(tx.msgs, &c)
	}
	return nil
}

// Claim implements [outbox.Store].
func (s *MemoryStore) Claim(_ context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	claim := &outbox.Claim{}
	blocked := map[[2]string]bool{} // aggregates whose head is not in this claim
	for _, r := range s.rows {
		if len(claim.Messages) >= p.Limit {
			break
		}
		agg := [2]string{r.msg.AggregateType, r.msg.AggregateID}
		switch {
		case r.status == outbox.StatusDead && p.Ordered && p.BlockOnDead:
			blocked[agg] = true
			continue
		case r.status != outbox.StatusPending:
			continue
		}
		if p.Ordered && blocked[agg] {
			continue
		}
		if p.Ordered {
			// One row per aggregate: the next waits for this one's settlement.
			blocked[agg] = true
		}
		if !r.due.IsZero() && r.due.After(now) {
			continue
		}
		r.attempts++
		r.due = now.Add(p.Lease)
		m := r.msg
		m.Attempt = r.attempts
		m.Payload, m.Headers = slices.Clone(r.msg.Payload), maps.Clone(r.msg.Headers)
		claim.Messages = append(claim.Messages, &m)
	}
	return claim, nil
}

// settle calls fn for each row of msgs that is still pending and claimed by
// the message's attempt (the fencing of the store contract).
func (s *MemoryStore) settle(msgs []*outbox.Message, fn func(*memRow, int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range msgs {
		j, found := slices.BinarySearchFunc(s.rows, m.RowID, func(r *memRow, id int64) int { return cmp.Compare(r.msg.RowID, id) })
		if found && s.rows[j].status == outbox.StatusPending && s.rows[j].attempts == m.Attempt {
			fn(s.rows[j], i)
		}
	}
}

// Ack implements [outbox.Store].
func (s *MemoryStore) Ack(_ context.Context, p outbox.AckParams) (int, error) {
	acked := map[*memRow]bool{}
	now := s.now()
	s.settle(p.Messages, func(r *memRow, _ int) {
		acked[r] = true
		r.status, r.sentAt, r.due = outbox.StatusSent, now, time.Time{}
	})
	if p.Delete {
		s.mu.Lock()
		s.rows = slices.DeleteFunc(s.rows, func(r *memRow) bool { return acked[r] })
		s.mu.Unlock()
	}
	return len(acked), nil
}

// Reschedule implements [outbox.Store].
func (s *MemoryStore) Reschedule(_ context.Context, p outbox.RescheduleParams) error {
	msgs := make([]*outbox.Message, len(p.Retries))
	for i, rt := range p.Retries {
		msgs[i] = rt.Message
	}
	s.settle(msgs, func(r *memRow, i int) {
		r.due, r.lastError = p.Retries[i].At, p.Retries[i].Err
		if p.Refund {
			r.attempts--
		}
	})
	return nil
}

// Kill implements [outbox.Store].
func (s *MemoryStore) Kill(_ context.Context, p outbox.KillParams) error {
	msgs := make([]*outbox.Message, len(p.Dead))
	for i, d := range p.Dead {
		msgs[i] = d.Message
	}
	s.settle(msgs, func(r *memRow, i int) {
		r.status, r.lastError, r.due = outbox.StatusDead, p.Dead[i].Reason, time.Time{}
	})
	return nil
}

// Stats implements [outbox.Store].
func (s *MemoryStore) Stats(context.Context) (*outbox.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	st := &outbox.Stats{}
	for _, r := range s.rows {
		switch r.status {
		case outbox.StatusPending:
			st.Pending++
			st.OldestPending = max(st.OldestPending, now.Sub(r.msg.CreatedAt))
		case outbox.StatusDead:
			st.Dead++
		case outbox.StatusSent:
			if now.Sub(r.sentAt) <= time.Hour {
				st.SentLastHour++
			}
			if now.Sub(r.sentAt) <= time.Minute {
				st.SentLastMinute++
			}
		}
	}
	return st, nil
}

// DeadLetter is a dead row of a [MemoryStore], as [MemoryStore.Dead] lists it.
type DeadLetter struct {
	Message  *outbox.Message
	Attempts int
	Reason   string
}

// Dead lists the dead rows, in id order.
func (s *MemoryStore) Dead() []DeadLetter {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []DeadLetter
	for _, r := range s.rows {
		if r.status == outbox.StatusDead {
			m := r.msg
			out = append(out, DeadLetter{Message: &m, Attempts: r.attempts, Reason: r.lastError})
		}
	}
	return out
}
