package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"

	"github.com/outboxkit/outbox/store/pgcdc"
)

// The postgres-cdc columns: relays started with --source cdc, sharing the
// slot that the first of them creates. postgres-cdc keeps rows (the
// harness's Writer), so the table is the ground truth as in the other
// columns; postgres-cdc-deleted deletes each outbox row in its writer's
// transaction (outbox.WithDeleteAfterInsert), so the messages are in the
// log only: the drain waits for the slot instead of the table, and with no
// row to sample nothing explains a duplicate (NATS drops re-sends by
// message id, so none is expected). Each cell's private server gets its
// own slot and publication, which the harness drops after the relays
// stopped, checking that none survives.
var (
	cdcFaults  = map[string]bool{"kill9": true, "sigstop": true, "db-restart": true, "broker-restart": true}
	cdcBrokers = map[string]bool{"nats": true}
)

// contractFaults are the cells of the -contract columns (with NATS): the
// faults that leave claims half done, leases running out, rows committed
// out of id order, and a database that forgets every lock.
var contractFaults = map[string]bool{"kill9": true, "sigstop": true, "longtx": true, "db-restart": true}

// inMatrix reports whether the matrix has the cell: every cell of the
// polling columns, cdcFaults with cdcBrokers in the postgres-cdc column,
// and contractFaults with NATS in the -contract ones.
func (s scenario) inMatrix() bool {
	switch {
	case strings.HasPrefix(s.db, "postgres-cdc"):
		return cdcFaults[s.fault] && cdcBrokers[s.broker]
	case strings.HasSuffix(s.db, "-contract"):
		return contractFaults[s.fault] && s.broker == "nats"
	}
	return true
}

// The relays' slot and publication: the defaults of the outbox table.
var (
	cdcSlot        = pgcdc.SlotName(outboxTable)
	cdcPublication = pgcdc.PublicationName(outboxTable)
)

// slotWatcher samples which server process streams the slot, every 50 ms,
// on a connection of its own: each time the streaming connection changes
// (a standby took over, or a relay reconnected after a database restart)
// it records the gap, from the last sample that showed the old reader to
// the first that shows the new one (a sample that fails, the server being
// down, shows none).
type slotWatcher struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	streamed bool            // some sample showed a reader
	gaps     []time.Duration // one per change of reader
}

// cdcSample is how often the slot watcher looks.
const cdcSample = 50 * time.Millisecond

func (r *run) watchSlot() *slotWatcher {
	db := r.db.open(1)
	ctx, cancel := context.WithCancel(context.Background())
	w := &slotWatcher{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer db.Close()
		var lastPID int64      // the last reader seen, 0 before the first
		var lastSeen time.Time // when it was last seen
		for r.sleep(ctx, cdcSample) {
			qctx, qcancel := context.WithTimeout(ctx, time.Second)
			var pid sql.NullInt64
			err := db.QueryRowContext(qctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", cdcSlot).Scan(&pid)
			qcancel()
			if err != nil || !pid.Valid {
				continue // no reader (or no server) now
			}
			now := time.Now()
			w.mu.Lock()
			w.streamed = true
			if lastPID != 0 && pid.Int64 != lastPID {
				w.gaps = append(w.gaps, now.Sub(lastSeen))
			}
			w.mu.Unlock()
			lastPID, lastSeen = pid.Int64, now
		}
	}()
	return w
}

// stop stops the sampling and waits for it.
func (w *slotWatcher) stop() {
	w.cancel()
	<-w.done
}

// dropSlots drops the relays' slot and publication once the relays have
// stopped, and checks that the relays had created them and that no slot
// or publication is left on the server.
func (r *run) dropSlots() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var dropped int
	for {
		// The server may still count the slot active for a moment after its
		// reader's exit.
		err := r.monitor.QueryRowContext(ctx, `SELECT count(pg_drop_replication_slot(slot_name))
FROM pg_replication_slots WHERE slot_name = $1`, cdcSlot).Scan(&dropped)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			r.check("cdc: drop slot %s: %v", cdcSlot, err)
			return
		}
		pause(100 * time.Millisecond)
	}
	if dropped == 0 {
		r.check("cdc: the relays created no slot %s", cdcSlot)
	}
	if _, err := r.monitor.ExecContext(ctx, "DROP PUBLICATION "+pgx.Identifier{cdcPublication}.Sanitize()); err != nil {
		r.check("cdc: drop publication %s (the relays should have created it): %v", cdcPublication, err)
	}
	var slots, pubs int
	err := r.monitor.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots), (SELECT count(*) FROM pg_publication)`).
		Scan(&slots, &pubs)
	switch {
	case err != nil:
		r.check("cdc: count the slots left: %v", err)
	case slots != 0 || pubs != 0:
		r.check("cdc: %d replication slots and %d publications left on the server", slots, pubs)
	}
}

// finishCDC adds what the slot watcher and the relays' logs say about the
// stream to rep: how often the reader of the slot changed and how long the
// slot went unread each time (the takeover time, to within a sample).
func (r *run) finishCDC(rep *Report, rows []Row, w *slotWatcher) {
	logs := r.relays.counts()
	w.mu.Lock()
	gaps := slices.Clone(w.gaps)
	streamed := w.streamed
	w.mu.Unlock()
	slices.Sort(gaps)
	if rep.Extra == nil {
		rep.Extra = map[string]int64{}
	}
	rep.Extra["cdc_reader_changes"] = int64(len(gaps))
	if len(gaps) > 0 {
		rep.Extra["cdc_gap_median_ms"] = gaps[len(gaps)/2].Milliseconds()
		rep.Extra["cdc_gap_max_ms"] = gaps[len(gaps)-1].Milliseconds()
	}
	for key, msg := range map[string]string{
		"cdc_streams_started_logged": "change stream started",
		"cdc_standby_logged":         "replication slot active in another process, standing by",
		"cdc_switches_logged":        "cdc source switched",
		"cdc_stream_down_logged":     "change stream down, retrying",
	} {
		rep.Extra[key] = logs[msg]
	}
	if r.logOnly {
		kept := 0
		for _, row := range rows {
			if row.Outbox && row.Status != outbox.StatusDead {
				kept++
			}
		}
		if kept > 0 {
			rep.Checks = append(rep.Checks, fmt.Sprintf("cdc: the writer was to delete its rows, and %d outbox rows are in the table", kept))
		}
	}
	if !streamed || logs["change stream started"] == 0 {
		rep.Checks = append(rep.Checks, "cdc: no relay streamed the slot")
	}
	if n := rep.Extra["cdc_streamer_kills"] + rep.Extra["cdc_streamer_pauses"]; n > 0 && len(gaps) == 0 {
		rep.Checks = append(rep.Checks, fmt.Sprintf("cdc: the slot never changed reader though its reader was killed or stopped %d times", n))
	}
}

// streamingRelay returns the slot of the relay process that streams the
// replication slot now, or -1: the server names the client port of the
// streaming connection, /proc/net/tcp the socket with that local port, and
// /proc/<pid>/fd the process that holds it.
func (r *run) streamingRelay() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var port int
	err := r.monitor.QueryRowContext(ctx, `SELECT c.client_port FROM pg_replication_slots s
JOIN pg_stat_replication c ON c.pid = s.active_pid WHERE s.slot_name = $1`, cdcSlot).Scan(&port)
	if err != nil {
		return -1
	}
	inode := socketInode(port)
	if inode == "" {
		return -1
	}
	for i := range r.relays.count() {
		p := r.relays.proc(i)
		if p == nil || p.exited() {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.pid()))
		for _, fd := range fds {
			link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p.pid(), fd.Name()))
			if err == nil && link == "socket:["+inode+"]" {
				return i
			}
		}
	}
	return -1
}

// socketInode returns the inode of the IPv4 TCP socket whose local port is
// port, from /proc/net/tcp, or "".
func socketInode(port int) string {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return ""
	}
	suffix := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && strings.HasSuffix(f[1], suffix) {
			return f[9]
		}
	}
	return ""
}

// slotBehind returns how many bytes of the log written before the drain
// began the slot has not confirmed yet: with deleted rows there is no
// pending row to count, and the slot is confirmed past a transaction only
// once each of its messages was acknowledged by the broker or recorded dead.
func (r *run) slotBehind(ctx context.Context, db *sql.DB) (int, error) {
	if r.drainLSN == "" {
		if err := db.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&r.drainLSN); err != nil {
			return -1, err
		}
	}
	var n int64
	err := db.QueryRowContext(ctx, `SELECT GREATEST(pg_wal_lsn_diff($1::pg_lsn, COALESCE(confirmed_flush_lsn, '0/0')), 0)::bigint
FROM pg_replication_slots WHERE slot_name = $2`, r.drainLSN, cdcSlot).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, fmt.Errorf("no slot %s", cdcSlot)
	}
	return int(n), err
}
