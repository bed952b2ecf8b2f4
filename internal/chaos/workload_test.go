package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
)

// workloadConfig shapes the producers.
type workloadConfig struct {
	producers int           // concurrent producer goroutines, one connection each
	aggs      int           // business aggregates
	rate      float64       // transactions per second, all producers together
	maxMsgs   int           // messages per transaction: 1..maxMsgs
	rollback  float64       // share of transactions rolled back on purpose
	slow      float64       // share of transactions that wait before COMMIT
	slowMax   time.Duration // the longest such wait
}

// txTimeout bounds one producer transaction (plus its deliberate hold).
const txTimeout = 10 * time.Second

// workload is the producers of a scenario: each transaction locks its
// aggregate's row, takes the next sequence numbers from it, inserts one
// business row per message and the messages themselves through the
// outbox Writer, and commits (or rolls back on purpose). Because the
// aggregate's row lock is held to COMMIT, each aggregate's committed
// sequence is 1..k with no gap, in commit order.
type workload struct {
	d   *database
	db  *sql.DB // the business pool
	cfg workloadConfig
	tag string // message id prefix, unique per run

	wg       sync.WaitGroup
	mu       sync.Mutex
	produces []Produce
	hogs     []Produce
}

// txSpec is one transaction to run.
type txSpec struct {
	agg      string
	n        int
	rollback bool
	hold     time.Duration // wait this long between the writes and COMMIT/ROLLBACK
}

// start runs the producers until stop is cancelled; each finishes the
// transaction it is in.
func (w *workload) start(stop context.Context, seed uint64) {
	for i := range w.cfg.producers {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		w.wg.Go(func() { w.producer(stop, i, rng) })
	}
}

// wait waits for every producer and hog to finish.
func (w *workload) wait() { w.wg.Wait() }

func (w *workload) producer(stop context.Context, id int, rng *rand.Rand) {
	every := time.Duration(float64(w.cfg.producers) / w.cfg.rate * float64(time.Second))
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-stop.Done():
			return
		case <-tick.C:
		}
		spec := txSpec{agg: aggName(rng.IntN(w.cfg.aggs)), n: 1 + rng.IntN(w.cfg.maxMsgs)}
		switch x := rng.Float64(); {
		case x < w.cfg.rollback:
			spec.rollback = true
			spec.hold = time.Duration(rng.Int64N(int64(30 * time.Millisecond)))
		case x < w.cfg.rollback+w.cfg.slow:
			spec.hold = time.Duration(rng.Int64N(int64(w.cfg.slowMax)))
		}
		p := w.run(fmt.Sprintf("p%d-%d", id, n), spec)
		w.mu.Lock()
		w.produces = append(w.produces, p)
		w.mu.Unlock()
		if p.Outcome != OK && !p.Deliberate {
			// The database is down or full: don't spin.
			select {
			case <-stop.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// hog runs one long transaction on a random aggregate in the background:
// it writes its messages (taking outbox ids), holds the transaction open
// for hold while other producers commit later ids, then commits or rolls
// back. It is the commit-order fault: ids are assigned at INSERT, not at
// COMMIT.
func (w *workload) hog(name string, agg string, hold time.Duration, rollback bool) {
	w.wg.Go(func() {
		p := w.run(name, txSpec{agg: agg, n: 1, rollback: rollback, hold: hold})
		w.mu.Lock()
		w.produces = append(w.produces, p)
		w.hogs = append(w.hogs, p)
		w.mu.Unlock()
	})
}

// history returns every transaction so far, and the hogs among them.
func (w *workload) history() (all, hogs []Produce) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Produce(nil), w.produces...), append([]Produce(nil), w.hogs...)
}

// run runs one transaction and reports how it ended.
func (w *workload) run(name string, spec txSpec) Produce {
	ctx, cancel := context.WithTimeout(context.Background(), txTimeout+spec.hold)
	defer cancel()
	p := Produce{Start: time.Now()}
	end := func(o Outcome) Produce {
		p.Outcome, p.End = o, time.Now()
		return p
	}
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return end(Fail)
	}
	abort := func() Produce {
		_ = tx.Rollback()
		return end(Fail)
	}
	var seq int64
	if err := tx.QueryRowContext(ctx, w.d.q("SELECT seq FROM chaos_agg WHERE agg = ? FOR UPDATE"), spec.agg).Scan(&seq); err != nil {
		return abort()
	}
	msgs := make([]*outbox.Message, spec.n)
	values := make([]string, spec.n)
	args := make([]any, 0, 3*spec.n)
	for i := range spec.n {
		ref := Ref{ID: fmt.Sprintf("%s-%s-%d", w.tag, name, i), Aggregate: spec.agg, Seq: seq + 1 + int64(i)}
		p.Messages = append(p.Messages, ref)
		msgs[i] = &outbox.Message{
			MessageID: ref.ID, AggregateType: "chaos", AggregateID: ref.Aggregate, EventType: eventType,
			Payload: fmt.Appendf(nil, `{"agg":%q,"seq":%d}`, ref.Aggregate, ref.Seq),
		}
		values[i] = "(?, ?, ?)"
		args = append(args, ref.ID, ref.Aggregate, ref.Seq)
	}
	if _, err := tx.ExecContext(ctx, w.d.q("UPDATE chaos_agg SET seq = ? WHERE agg = ?"), seq+int64(spec.n), spec.agg); err != nil {
		return abort()
	}
	if _, err := tx.ExecContext(ctx, w.d.q("INSERT INTO chaos_event (message_id, agg, seq) VALUES "+
		strings.Join(values, ", ")), args...); err != nil {
		return abort()
	}
	if err := w.d.writer.Write(ctx, tx, msgs...); err != nil {
		return abort()
	}
	if spec.hold > 0 {
		t := time.NewTimer(spec.hold)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	if spec.rollback {
		p.Deliberate = true
		return abort()
	}
	if err := tx.Commit(); err != nil {
		if errors.Is(err, sql.ErrTxDone) {
			return end(Fail) // database/sql rolled it back when ctx ended; COMMIT was never sent
		}
		return end(Info)
	}
	return end(OK)
}
