package pgcdc

import (
	"hash/maphash"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxkit/outbox"
)

// entryState is where a streamed message is on its way through the relay.
type entryState uint8

const (
	entryReady    entryState = iota // not yet handed out, or handed back
	entryInFlight                   // claimed by the relay, not yet settled
	entryWaiting                    // rescheduled: due again at entry.due
	entryDone                       // acknowledged, dead, or skipped
)

// entry is one message read from the stream, kept until it is settled.
type entry struct {
	// msg is the message as read from the stream. Each claim hands out a
	// copy of it (out), so that a claim never changes a message that the
	// relay still holds from an earlier one (its attempt, for one).
	msg      *outbox.Message
	out      *outbox.Message // the copy handed out last, the key of window.byMsg
	bad      error           // why the row could not be decoded; it is handed out as malformed
	txn      *txn
	state    entryState
	due      time.Time
	attempts int // attempts counted so far (not refunded); a kept row's is the table's (WithTableAttempts)
	// kept: the look-up found its row pending. A row it did not find was
	// deleted by its writer, or is not visible yet: the server can send a
	// commit a moment before it is visible to other sessions' snapshots,
	// so a missing row is settled in the table all the same.
	kept    bool
	checked bool // its row's status was looked up
	stale   bool // read on an earlier connection: settling it leaves the window alone
	// seq is the entry's place in its transaction (0, 1, ...): with the
	// transaction's commit LSN, its position in the slot's order (see pos).
	seq int
	// prior: at or below the mark that the slot's readers had recorded
	// when this connection started (see handedMark), so an earlier reader
	// may have handed it out without counting the attempt in the table.
	prior bool
	// counted is the row's retry_count as this source left it at its last
	// claim (one less than the attempt after a fresh claim, which counts
	// nothing in the table); Reschedule is fenced by it.
	counted int
	agg     uint64 // the aggregate's hash (see aggregate), when hashed
	hashed  bool
}

// pos is an entry's position in the slot's order: the commit LSN of its
// transaction (known at BEGIN: pgoutput sends a transaction after its
// commit) and its place in it. The same log read again gives each entry
// the same position.
type pos struct {
	lsn pglogrepl.LSN
	seq int
}

// after reports whether p comes after q.
func (p pos) after(q pos) bool { return p.lsn > q.lsn || (p.lsn == q.lsn && p.seq > q.seq) }

func (e *entry) pos() pos { return pos{lsn: e.txn.final, seq: e.seq} }

// txn is one committed (or still arriving) transaction of the stream.
type txn struct {
	xid       uint32        // its transaction id, from BEGIN
	final     pglogrepl.LSN // its commit LSN, from BEGIN
	added     int           // entries added so far (the next entry's seq)
	end       pglogrepl.LSN // the transaction's end LSN, known at its commit
	open      int           // its entries not yet settled
	committed bool
}

// window holds the messages read from the stream and not yet settled, in
// commit order, and computes how far the slot may be confirmed: to the end
// of the last transaction that, with every one before it, is settled whole.
// It is not safe for concurrent use: Source guards it with its mutex.
type window struct {
	entries   []*entry // commit order; a settled prefix is trimmed
	txns      []*txn   // transactions with entries not yet settled, or not yet committed
	confirmed pglogrepl.LSN
	byMsg     map[*outbox.Message]*entry // entries handed out, by the message the relay holds
}

func newWindow(start pglogrepl.LSN) *window {
	return &window{confirmed: start, byMsg: make(map[*outbox.Message]*entry)}
}

// unsettled is how many entries the window holds.
func (w *window) unsettled() int { return len(w.entries) }

// begin opens a transaction.
func (w *window) begin() *txn {
	t := &txn{}
	w.txns = append(w.txns, t)
	return t
}

// add appends a message of the open transaction t.
func (w *window) add(t *txn, e *entry) {
	e.txn, e.seq = t, t.added
	t.added++
	t.open++
	w.entries = append(w.entries, e)
}

// commit closes t at end and advances the confirmable position.
func (w *window) commit(t *txn, end pglogrepl.LSN) {
	t.end, t.committed = end, true
	w.advance()
}

// idleAt moves the confirmable position to lsn, a position the server says
// it has sent everything before, when the window holds nothing.
func (w *window) idleAt(lsn pglogrepl.LSN) {
	if len(w.txns) == 0 && len(w.entries) == 0 && lsn > w.confirmed {
		w.confirmed = lsn
	}
}

// settle marks e done and advances the confirmable position.
func (w *window) settle(e *entry) {
	if e.state == entryDone {
		return
	}
	e.state = entryDone
	delete(w.byMsg, e.out)
	if e.stale {
		return
	}
	e.txn.open--
	w.advance()
}

// advance trims the settled prefix of entries and of transactions.
func (w *window) advance() {
	i := 0
	for i < len(w.entries) && w.entries[i].state == entryDone {
		w.entries[i] = nil
		i++
	}
	w.entries = w.entries[i:]
	j := 0
	for j < len(w.txns) && w.txns[j].committed && w.txns[j].open == 0 {
		if w.txns[j].end > w.confirmed {
			w.confirmed = w.txns[j].end
		}
		w.txns[j] = nil
		j++
	}
	w.txns = w.txns[j:]
}

// reset forgets what the window holds, for a new connection that will read
// it again from the confirmed position. Entries in flight stay known by
// their messages, so that the relay can settle them (in the table) later.
func (w *window) reset() {
	for _, e := range w.entries {
		e.stale = true
		if e.state != entryInFlight {
			delete(w.byMsg, e.out)
		}
	}
	w.entries, w.txns = nil, nil
}

// candidates returns up to limit entries the relay may be handed now, in
// commit order: ready ones, and rescheduled ones that are due. With ordered,
// each aggregate contributes a run: its entries up to the first one in
// flight or waiting for a retry, which holds back the later ones; the relay
// publishes a run in waves (message k+1 after the broker confirmed k).
func (w *window) candidates(limit int, ordered bool, now time.Time) []*entry {
	var out []*entry
	var blocked map[uint64]bool
	if ordered {
		blocked = make(map[uint64]bool)
	}
	for _, e := range w.entries {
		if len(out) == limit {
			break
		}
		if e.state == entryDone {
			continue
		}
		ready := e.state == entryReady || (e.state == entryWaiting && !now.Before(e.due))
		if ordered {
			// A run: the aggregate's entries in commit order, up to the
			// first one that is in flight or waits out a backoff, which
			// holds back the rest (the relay publishes a run in waves).
			k := e.aggregate()
			if blocked[k] {
				continue
			}
			if !ready {
				blocked[k] = true
				continue
			}
		}
		if ready {
			out = append(out, e)
		}
	}
	return out
}

// handOut marks the entries in flight, counting an attempt each.
func (w *window) handOut(es []*entry) {
	for _, e := range es {
		e.state = entryInFlight
		e.attempts++
		m := *e.msg
		m.Attempt = e.attempts
		delete(w.byMsg, e.out) // the copy of an earlier claim, settled (rescheduled) by now
		e.out = &m
		w.byMsg[e.out] = e
	}
}

// aggSeed seeds the aggregate hashes of the process.
var aggSeed = maphash.MakeSeed()

// aggregate returns the hash of e's aggregate (type and id), the key of
// per-aggregate order in candidates, computed once. Two aggregates that
// share a hash hold each other back, which delays a message and never
// reorders one.
func (e *entry) aggregate() uint64 {
	if !e.hashed {
		var h maphash.Hash
		h.SetSeed(aggSeed)
		h.WriteString(e.msg.AggregateType)
		h.WriteByte(0)
		h.WriteString(e.msg.AggregateID)
		e.agg, e.hashed = h.Sum64(), true
	}
	return e.agg
}
