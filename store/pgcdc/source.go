package pgcdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/internal/rowcheck"
)

// Defaults of the options.
const (
	// DefaultTable is the outbox table unless WithTable says otherwise.
	DefaultTable = "outbox_message"
	// DefaultFailoverAfter is how long the stream may be down before the
	// source polls the table instead (WithFailoverAfter).
	DefaultFailoverAfter = 30 * time.Second
	// DefaultRetryInterval is how often the source tries to start streaming
	// again while it cannot (WithRetryInterval); it bounds a standby's
	// takeover time.
	DefaultRetryInterval = time.Second
	// DefaultMaxWindow is the most messages read from the stream and not yet
	// settled that the source holds in memory (WithMaxWindow).
	DefaultMaxWindow = 10000
	// DefaultStatusInterval is how often the source confirms its position
	// to the server (WithStatusInterval).
	DefaultStatusInterval = time.Second
)

// Mode is what a Source's claims read.
type Mode int32

// The modes of a Source.
const (
	ModeStream  Mode = iota // claims hand out what the stream read
	ModePolling             // claims poll the table (the fallback store)
	ModeStandby             // another process streams the slot; claims hand out nothing
)

// String returns stream, polling or standby.
func (m Mode) String() string {
	switch m {
	case ModeStream:
		return "stream"
	case ModePolling:
		return "polling"
	case ModeStandby:
		return "standby"
	}
	return fmt.Sprintf("mode(%d)", int32(m))
}

// Compile-time checks of what a Source implements.
var (
	_ outbox.Store    = (*Source)(nil)
	_ outbox.Notifier = (*Source)(nil)
	_ outbox.Pinger   = (*Source)(nil)
)

// Source is an [outbox.Store] whose claims hand out the inserts of the
// outbox table read from PostgreSQL's logical replication (pgoutput), in
// commit order, instead of polling the table. An [outbox.Relay] drives it
// as it drives any store: backoff, attempts, dead letters, the pause of a
// destination that is down, hooks and metrics are the relay's. See the
// package documentation for what it guarantees.
//
// [Source.Run] must run beside the relay: it reads the stream. A Source is
// safe for concurrent use; several relay loops may share one.
type Source struct {
	cfg   config
	pool  *pgxpool.Pool
	conn  *pgconn.Config // the replication connection's
	table *table
	dead  *table // where a log-only table's dead messages go (WithDeadTable); nil otherwise
	log   *slog.Logger

	mu       sync.Mutex
	room     chan struct{} // signalled when the window may have room again
	win      *window
	wakes    map[int]func()
	nextWake int

	// State of the stream, under mu.
	streaming bool      // START_REPLICATION succeeded and the connection is up
	standby   bool      // the slot is active in another process
	refused   bool      // the server refused replication, or the slot was lost: poll now
	downSince time.Time // when the stream was last seen up (or the source was made)
	catchUp   int64     // after a new slot: poll until no pending row has id <= catchUp
	nextCheck time.Time // when to look again whether the catch-up is over
	mode      Mode      // the mode of the last claim
	// marks: this connection may hand out fresh entries (see handedMark);
	// handedAtStart is the slot's mark when it started.
	marks         bool
	handedAtStart pos

	switches   atomic.Int64
	duplicates atomic.Int64
	confirmed  atomic.Uint64
}

type config struct {
	table          string
	slot           string
	publication    string
	fallback       outbox.Store
	failoverAfter  time.Duration
	retryInterval  time.Duration
	maxWindow      int
	statusInterval time.Duration
	createSlot     bool
	tableAttempts  bool
	columns        colmap.Map
	deadTable      string
	logger         *slog.Logger
}

// Option configures a [Source].
type Option func(*config)

// WithTable sets the outbox table: a name or schema.name, each part a
// lower-case SQL identifier. Default: DefaultTable ("outbox_message").
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithSlot sets the replication slot's name. Default: "outbox_" and the
// table's name, schema-qualified names joined by "_", cut to 63 bytes.
func WithSlot(name string) Option { return func(c *config) { c.slot = name } }

// WithPublication sets the publication's name. Default: the slot's default
// name and "_pub".
func WithPublication(name string) Option { return func(c *config) { c.publication = name } }

// WithFallback sets the store that polls the same table while the stream
// cannot be read (usually a pgstore.Store on it): after the stream was down
// for the failover time, when the server refuses replication, and while the
// rows written before a new slot are caught up. Without one, the source
// only waits for the stream. Default: none.
func WithFallback(s outbox.Store) Option { return func(c *config) { c.fallback = s } }

// WithFailoverAfter sets how long the stream may be down before the source
// polls through its fallback. Default: DefaultFailoverAfter (30 s).
func WithFailoverAfter(d time.Duration) Option { return func(c *config) { c.failoverAfter = d } }

// WithRetryInterval sets how often the source tries to start streaming
// while it cannot, a standby included. Default: DefaultRetryInterval (1 s).
func WithRetryInterval(d time.Duration) Option { return func(c *config) { c.retryInterval = d } }

// WithMaxWindow sets the most messages read from the stream and not yet
// settled that the source holds; past it the source stops reading (the
// server holds the log), so memory stays flat whatever the size of a
// transaction. Default: DefaultMaxWindow (10,000).
func WithMaxWindow(n int) Option { return func(c *config) { c.maxWindow = n } }

// WithStatusInterval sets how often the source confirms to the server the
// position up to which every message is settled. Messages settled after
// the last confirmation are read again after a crash (the duplicates
// window). Default: DefaultStatusInterval (1 s).
func WithStatusInterval(d time.Duration) Option { return func(c *config) { c.statusInterval = d } }

// WithCreateSlot makes the source create the publication and the slot when
// they are missing, and create the slot again when it was dropped or
// invalidated (max_slot_wal_keep_size); the rows written meanwhile are then
// polled through the fallback before streaming resumes. Default: true.
func WithCreateSlot(on bool) Option { return func(c *config) { c.createSlot = on } }

// WithTableAttempts makes claims of a kept row count its attempts in the
// table (retry_count + 1, in the statement that looks the row up), as a
// polling relay's claim does, except the first claim of a message no
// earlier reader of the slot handed out, which raises a per-slot mark in
// the side table outbox_cdc_handed instead (one row write per claimed
// batch); the next reader counts every message at or below the mark as
// handed out once. So attempts survive a restart, and a message that
// crashes the relay every time it is published goes dead after the relay's
// max attempts instead of being read again forever. Off, attempts are
// counted in memory and start again at 1 after a restart; a claim then
// looks a row up only the first time it is handed out. Messages whose rows
// the writer deleted (outbox.WithDeleteAfterInsert) have no row to count
// in: their attempts are counted in memory either way. Default: true.
func WithTableAttempts(on bool) Option { return func(c *config) { c.tableAttempts = on } }

// WithColumns makes the source read a table whose columns have other names:
// cols maps each contract column (docs/table-contract.md: message_id,
// aggregate_type, aggregate_id, event_type, payload, ...) to the table's
// column that holds it, and the source reads only the columns it names.
// The message columns are required; the state columns (id, status,
// retry_count, next_retry_at, created_at, updated_at) are mapped all or
// none. Without them (created_at alone may be mapped, as the write time)
// the table is log-only, as the table of Debezium's outbox event router
// is: messages are read from the log only and nothing is written back to
// the table, attempts are counted in memory, a message that fails for good
// goes to WithDeadTable (required then), and there is no fallback to
// polling (WithFallback is refused). New reports a mapping that names
// unknown contract columns or leaves a required one out; CheckTable and
// Run report mapped columns the table lacks, with the mapping and the
// table's columns. Default: none (the contract's names, optional columns
// used where present).
func WithColumns(cols map[string]string) Option {
	return func(c *config) { c.columns = colmap.Map(maps.Clone(cols)) }
}

// WithDeadTable sets the table, in the contract's own layout (outbox
// migrate creates one), into which the source inserts as dead rows
// (status 2) the messages of a log-only table (see WithColumns) that fail
// for good, so that `outbox dead list --table` shows them and nothing is
// dropped. Only for a log-only table, which requires it. Default: none.
func WithDeadTable(name string) Option { return func(c *config) { c.deadTable = name } }

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// New returns a Source on the outbox table that pool reaches, streaming over
// a replication connection made from dsn (a PostgreSQL URL or key=value
// string; replication=database is added). It does no I/O. It returns an
// error naming every invalid option. It panics if pool is nil.
func New(pool *pgxpool.Pool, dsn string, opts ...Option) (*Source, error) {
	if pool == nil {
		panic("pgcdc: New with a nil pool")
	}
	cfg := config{table: DefaultTable, failoverAfter: DefaultFailoverAfter, retryInterval: DefaultRetryInterval,
		maxWindow: DefaultMaxWindow, statusInterval: DefaultStatusInterval, createSlot: true, tableAttempts: true,
		logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.slot == "" {
		cfg.slot = SlotName(cfg.table)
	}
	if cfg.publication == "" {
		cfg.publication = PublicationName(cfg.table)
	}
	var errs []error
	for _, p := range splitTable(cfg.table) {
		if !identRE.MatchString(p) {
			errs = append(errs, fmt.Errorf("WithTable: %q is not a lower-case SQL identifier", cfg.table))
			break
		}
	}
	if !identRE.MatchString(cfg.slot) {
		errs = append(errs, fmt.Errorf("WithSlot: %q: a slot name has only a-z, 0-9 and _, at most 63 bytes", cfg.slot))
	}
	if !identRE.MatchString(cfg.publication) {
		errs = append(errs, fmt.Errorf("WithPublication: %q is not a lower-case SQL identifier", cfg.publication))
	}
	if cfg.failoverAfter <= 0 || cfg.retryInterval <= 0 || cfg.statusInterval <= 0 {
		errs = append(errs, errors.New("WithFailoverAfter, WithRetryInterval, WithStatusInterval: must be positive"))
	}
	if cfg.maxWindow < 1 {
		errs = append(errs, errors.New("WithMaxWindow: must be at least 1"))
	}
	errs = append(errs, cfg.checkColumns()...)
	cc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		errs = append(errs, fmt.Errorf("dsn: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("pgcdc: new: %w", err)
	}
	cc.RuntimeParams["replication"] = "database"
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = "outbox-cdc"
	}
	s := &Source{cfg: cfg, pool: pool, conn: cc, table: newTable(pool, cfg.table, cfg.columns),
		log: cfg.logger.With("component", "cdc", "slot", cfg.slot), win: newWindow(0),
		wakes: make(map[int]func()), downSince: time.Now()}
	if cfg.deadTable != "" {
		s.dead = newTable(pool, cfg.deadTable, nil)
	}
	s.room = make(chan struct{}, 1)
	return s, nil
}

// checkColumns returns the problems of WithColumns and of the options a
// log-only table requires or refuses.
func (c *config) checkColumns() []error {
	var errs []error
	if err := c.columns.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("WithColumns: %w", err))
	}
	logOnly := c.columns.LogOnly()
	switch {
	case logOnly && c.fallback != nil:
		errs = append(errs, errors.New("WithFallback: a log-only table (WithColumns maps no state columns) cannot be polled"))
	case logOnly && c.deadTable == "":
		errs = append(errs, errors.New("WithDeadTable: a log-only table (WithColumns maps no state columns) needs a table for the messages that fail for good"))
	case !logOnly && c.deadTable != "":
		errs = append(errs, errors.New("WithDeadTable: only for a log-only table (WithColumns maps no state columns); dead messages are marked in the table"))
	}
	if c.deadTable != "" {
		for _, p := range splitTable(c.deadTable) {
			if !identRE.MatchString(p) {
				errs = append(errs, fmt.Errorf("WithDeadTable: %q is not a lower-case SQL identifier", c.deadTable))
				break
			}
		}
	}
	return errs
}

// LogOnly reports whether the source's table is log-only (see WithColumns):
// nothing is written back to it.
func (s *Source) LogOnly() bool { return s.table.logOnly }

// Slot returns the replication slot's name.
func (s *Source) Slot() string { return s.cfg.slot }

// Publication returns the publication's name.
func (s *Source) Publication() string { return s.cfg.publication }

// Mode returns what the source's claims read now.
func (s *Source) Mode() Mode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.modeLocked(time.Now())
}

// Streaming reports whether the replication connection is streaming now.
func (s *Source) Streaming() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streaming
}

// Held returns how many messages read from the stream and not yet settled
// the source holds now: at most WithMaxWindow.
func (s *Source) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.win.unsettled()
}

// Switches returns how many times the source went from streaming to
// polling or back.
func (s *Source) Switches() int64 { return s.switches.Load() }

// Duplicates returns how many messages the stream published that the table
// already showed sent or dead: sent by a polling relay during a failover
// and read again from the slot.
func (s *Source) Duplicates() int64 { return s.duplicates.Load() }

// Confirmed returns the position last confirmed to the server as an LSN
// (every message before it is settled).
func (s *Source) Confirmed() uint64 { return s.confirmed.Load() }

// modeLocked decides the mode from the stream's state.
func (s *Source) modeLocked(now time.Time) Mode {
	switch {
	case s.standby && !s.streaming:
		return ModeStandby
	case s.cfg.fallback == nil:
		return ModeStream
	case s.streaming && s.catchUp == 0:
		return ModeStream
	case s.refused || s.catchUp > 0:
		return ModePolling
	case !s.streaming && now.Sub(s.downSince) >= s.cfg.failoverAfter:
		return ModePolling
	}
	return ModeStream
}

// Claim hands out up to p.Limit messages read from the stream, in commit
// order, that are ready or due again (with p.Ordered, only the first
// unsettled message of each aggregate), counting an attempt each: in the
// table for kept rows (see WithTableAttempts), in memory for rows the
// writer deleted. Kept rows that the table shows settled already (sent by
// a polling relay) are skipped. While the stream is down past the failover time, or rows
// written before a new slot are caught up, it claims through the fallback.
// A standby claims nothing. p.Lease is not used: no other process can
// claim what this one read from its slot.
func (s *Source) Claim(ctx context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	now := time.Now()
	s.mu.Lock()
	mode := s.modeLocked(now)
	if mode != s.mode {
		s.switches.Add(1)
		s.log.LogAttrs(ctx, slog.LevelWarn, "cdc source switched", slog.String("from", s.mode.String()),
			slog.String("to", mode.String()))
		s.mode = mode
	}
	catchUp := s.catchUp
	checkCatchUp := catchUp > 0 && !now.Before(s.nextCheck)
	if checkCatchUp {
		s.nextCheck = now.Add(s.cfg.retryInterval)
	}
	s.mu.Unlock()

	switch mode {
	case ModeStandby:
		return &outbox.Claim{}, nil
	case ModePolling:
		if checkCatchUp { // every retry interval, also while new rows keep the claims busy
			s.endCatchUp(ctx, catchUp)
		}
		return s.cfg.fallback.Claim(ctx, p)
	}
	return s.claimStream(ctx, p, now)
}

// endCatchUp streams again once no row written before the new slot is pending.
func (s *Source) endCatchUp(ctx context.Context, upTo int64) {
	left, err := s.table.pendingUpTo(ctx, upTo)
	if err != nil || left {
		return
	}
	s.mu.Lock()
	if s.catchUp == upTo {
		s.catchUp = 0
		s.log.LogAttrs(ctx, slog.LevelInfo, "rows written before the new slot caught up", slog.Int64("up_to_id", upTo))
	}
	s.mu.Unlock()
}

func (s *Source) claimStream(ctx context.Context, p outbox.ClaimParams, now time.Time) (*outbox.Claim, error) {
	s.mu.Lock()
	es := s.win.candidates(p.Limit, p.Ordered, now)
	s.win.handOut(es)
	cl, fresh := s.planLookUp(es)
	s.mu.Unlock()
	if len(es) == 0 {
		return &outbox.Claim{}, nil
	}
	var st map[int64]rowState
	if len(cl.ids) > 0 {
		var err error
		if st, err = s.claimRows(ctx, cl); err != nil {
			s.mu.Lock()
			for _, e := range es {
				s.unclaim(e)
			}
			s.mu.Unlock()
			return nil, err
		}
	}
	c := &outbox.Claim{Messages: make([]*outbox.Message, 0, len(es))}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range es {
		if s.lookUp(e) && !s.applyRow(e, st, fresh[e]) {
			continue // settled already
		}
		if e.bad != nil {
			c.Malformed = append(c.Malformed, outbox.MalformedRow{Message: e.out, Err: e.bad})
			continue
		}
		c.Messages = append(c.Messages, e.out)
	}
	s.wakeAllLocked() // a skipped entry may free its aggregate's next message
	return c, nil
}

// planLookUp returns the claim statement's input for the entries handed
// out: which of them does the table keep, and are they still pending? A
// row seen once is looked up again only when it is kept: each claim of it
// counts its attempt in the table, except a fresh claim (see fresh), whose
// entries come back in the set. Called with s.mu held.
func (s *Source) planLookUp(es []*entry) (claim, map[*entry]bool) {
	cl := claim{slot: s.cfg.slot}
	seen := map[uint32]bool{}
	fresh := map[*entry]bool{}
	for _, e := range es {
		if !s.lookUp(e) {
			continue
		}
		floor := int32(-1)
		switch {
		case s.fresh(e):
			fresh[e] = true
			if p := e.pos(); cl.mark == nil || p.after(*cl.mark) {
				cl.mark = &p
			}
		case s.cfg.tableAttempts:
			floor = int32(e.attempts - 1)
			if e.prior && !e.checked && floor < 1 {
				floor = 1 // an earlier reader may have handed it out fresh
			}
		}
		cl.ids, cl.floors = append(cl.ids, e.msg.RowID), append(cl.floors, floor)
		if !e.checked && !seen[e.txn.xid] {
			seen[e.txn.xid] = true
			cl.xids = append(cl.xids, int64(e.txn.xid))
		}
	}
	return cl, fresh
}

// applyRow takes what the claim statement found of e's row (st) into e,
// and reports false when the row was settled already, by a polling relay or
// an operator (a kept row that is gone was deleted after it was sent): e is
// then settled in the window too. Called with s.mu held.
func (s *Source) applyRow(e *entry, st map[int64]rowState, fresh bool) bool {
	row, found := st[e.msg.RowID]
	switch {
	case found && row.status != 0, !found && e.checked:
		e.checked = true
		s.win.settle(e)
		return false
	case found && fresh:
		// Counted in memory only: the slot's mark, raised in the same
		// statement, tells a later reader that it may have been handed
		// out. The row's count is that of a polling relay, if one claimed
		// it during a failover.
		e.counted = row.count
		e.attempts = min(row.count, rowcheck.MaxAttempt-1) + 1
		e.out.Attempt = e.attempts
	case found && s.cfg.tableAttempts:
		e.counted = row.count
		e.attempts = row.count // the table's count, which survives a restart
		e.out.Attempt = row.count
	}
	e.checked, e.kept = true, found
	return true
}

// lookUp reports whether a claim looks e's row up: the first time, and,
// when attempts are counted in the table, every time a kept row is claimed.
func (s *Source) lookUp(e *entry) bool {
	return e.bad == nil && (!e.checked || (e.kept && s.cfg.tableAttempts))
}

// fresh reports whether a claim of e may count its attempt in memory only,
// with attempts in the table: its first claim, by the connection that
// streams the slot now, and no reader of the slot before this connection
// handed it out. The claim raises the slot's mark past e (handedMark), so
// that a reader after a crash counts it as handed out once already (its
// floor, in claimRows), and a claim after a retry counts it in the table.
// It spares the drain of kept rows a write per row: only retried messages,
// and those read again after a restart, are counted in the table.
func (s *Source) fresh(e *entry) bool {
	return s.cfg.tableAttempts && s.marks && s.streaming && !e.stale && !e.prior && !e.checked && e.attempts == 1
}

// claimRows runs table.claimRows until the transactions of c are visible
// to its snapshot, which takes a moment at most.
func (s *Source) claimRows(ctx context.Context, c claim) (map[int64]rowState, error) {
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 50*time.Millisecond) {
		ok, st, err := s.table.claimRows(ctx, c)
		if err != nil || ok {
			return st, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// unclaim hands e back without counting the attempt.
func (s *Source) unclaim(e *entry) {
	if e.state != entryInFlight {
		return
	}
	e.attempts--
	e.state = entryReady
	if e.stale {
		delete(s.win.byMsg, e.out)
	}
}

// split sorts msgs into the entries this source handed out and the
// messages the fallback claimed.
func (s *Source) split(msgs []*outbox.Message) (mine []*entry, theirs []*outbox.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		if e, ok := s.win.byMsg[m]; ok {
			mine = append(mine, e)
		} else {
			theirs = append(theirs, m)
		}
	}
	return mine, theirs
}

// Ack settles acknowledged messages: kept rows are marked sent (or deleted
// with p.Delete) in one statement, then the messages leave the window and
// the confirmable position advances. If the table cannot be written, the
// messages are handed out again later (duplicates, never a loss). It
// returns how many messages it settled.
func (s *Source) Ack(ctx context.Context, p outbox.AckParams) (int, error) {
	mine, theirs := s.split(p.Messages)
	n := 0
	if len(theirs) > 0 {
		k, err := s.fallbackStore().Ack(ctx, outbox.AckParams{Messages: theirs, Delete: p.Delete})
		if err != nil {
			return 0, err
		}
		n += k
	}
	if len(mine) == 0 {
		return n, nil
	}
	// Every row, also those the look-up did not find (see entry.kept): a
	// row the writer deleted is simply not there to change.
	ids := make([]int64, len(mine))
	for i, e := range mine {
		ids[i] = e.msg.RowID
	}
	var changed map[int64]bool
	if !s.table.logOnly {
		var err error
		if changed, err = s.table.markSent(ctx, ids, p.Delete); err != nil {
			s.handBack(mine, time.Now())
			return n, err
		}
	}
	for _, e := range mine {
		if e.kept && !changed[e.msg.RowID] { // settled by someone else meanwhile
			s.duplicates.Add(1)
		}
	}
	s.mu.Lock()
	for _, e := range mine {
		s.win.settle(e)
	}
	s.wakeAllLocked()
	s.mu.Unlock()
	return n + len(mine), nil
}

func (s *Source) fallbackStore() outbox.Store {
	if s.cfg.fallback == nil {
		return noFallback{}
	}
	return s.cfg.fallback
}

// handBack makes entries due again at at, their attempts not counted.
func (s *Source) handBack(es []*entry, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range es {
		if e.state != entryInFlight {
			continue
		}
		e.attempts--
		e.state, e.due = entryWaiting, at
		if e.stale {
			delete(s.win.byMsg, e.out)
		}
	}
}

// Reschedule makes messages due again at their times, in memory; with
// p.Refund their attempts are not counted. With attempts in the table (see
// WithTableAttempts), kept rows also get what polling records, before they
// can be claimed again: the due time, the error, and with p.Refund the
// attempt given back. The messages are due again even when the table
// cannot be written: the attempt then stays counted there, as a polling
// relay's would.
func (s *Source) Reschedule(ctx context.Context, p outbox.RescheduleParams) error {
	var theirs []outbox.Retry
	var kept []rowRetry
	s.mu.Lock()
	for _, r := range p.Retries {
		e, ok := s.win.byMsg[r.Message]
		switch {
		case !ok:
			theirs = append(theirs, r)
		case e.state == entryInFlight && e.kept && s.cfg.tableAttempts:
			kept = append(kept, rowRetry{id: e.msg.RowID, attempt: e.out.Attempt, counted: e.counted, at: r.At, err: r.Err})
		}
	}
	s.mu.Unlock()
	var errs []error
	if len(kept) > 0 { // in flight until written, so that no claim counts them meanwhile
		errs = append(errs, s.table.reschedule(ctx, kept, p.Refund))
	}
	s.mu.Lock()
	for _, r := range p.Retries {
		e, ok := s.win.byMsg[r.Message]
		if !ok || e.state != entryInFlight {
			continue
		}
		if p.Refund {
			e.attempts--
		}
		e.state, e.due = entryWaiting, r.At
		if e.stale { // read again on the new connection
			delete(s.win.byMsg, e.out)
		}
	}
	s.mu.Unlock()
	if len(theirs) > 0 {
		errs = append(errs, s.fallbackStore().Reschedule(ctx, outbox.RescheduleParams{Retries: theirs, Refund: p.Refund}))
	}
	return errors.Join(errs...)
}

// Kill records messages as dead: a kept row is marked dead, and a message
// whose row the writer deleted is inserted as a dead row (status 2, which
// the stream ignores), so that `outbox dead list` shows both; a log-only
// table's are inserted into the dead table (WithDeadTable). Then they
// leave the window: a dead message never blocks the stream.
func (s *Source) Kill(ctx context.Context, p outbox.KillParams) error {
	var dead, theirs []outbox.Dead
	var mine []*entry
	s.mu.Lock()
	for _, d := range p.Dead {
		if e, ok := s.win.byMsg[d.Message]; ok {
			dead = append(dead, d)
			mine = append(mine, e)
		} else {
			theirs = append(theirs, d)
		}
	}
	s.mu.Unlock()
	if len(theirs) > 0 {
		if err := s.fallbackStore().Kill(ctx, outbox.KillParams{Dead: theirs}); err != nil {
			return err
		}
	}
	err := s.kill(ctx, dead)
	if err != nil {
		s.handBack(mine, time.Now().Add(s.cfg.retryInterval))
		return err
	}
	s.mu.Lock()
	for _, e := range mine {
		s.win.settle(e)
	}
	s.wakeAllLocked()
	s.mu.Unlock()
	return nil
}

// kill marks the kept rows of dead dead, and inserts the others (rows the
// writer deleted) as dead rows; a row settled meanwhile stays as it is
// (the insert skips a message id the table has). A log-only table's dead
// messages are all inserted into the dead table.
func (s *Source) kill(ctx context.Context, dead []outbox.Dead) error {
	if len(dead) == 0 {
		return nil
	}
	if s.table.logOnly { // nothing to mark: every one goes to the dead table
		var rest []outbox.Dead
		for _, d := range dead {
			if d.Message.MessageID != "" {
				rest = append(rest, d)
			} else {
				s.log.LogAttrs(ctx, slog.LevelError, "dead message without a message id not recorded in the dead table",
					slog.String("reason", d.Reason))
			}
		}
		if len(rest) == 0 {
			return nil
		}
		return s.dead.insertDead(ctx, rest)
	}
	marked, err := s.table.markDead(ctx, dead)
	if err != nil {
		return err
	}
	var rest []outbox.Dead
	for _, d := range dead {
		if !marked[d.Message.RowID] && d.Message.MessageID != "" {
			rest = append(rest, d)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	return s.table.insertDead(ctx, rest)
}

// Stats reports the table's backlog through the fallback, and without one
// the messages the window holds as pending.
func (s *Source) Stats(ctx context.Context) (*outbox.Stats, error) {
	if s.cfg.fallback != nil {
		return s.cfg.fallback.Stats(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &outbox.Stats{Pending: int64(s.win.unsettled())}, nil
}

// Ping checks the database through the pool.
func (s *Source) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// Listen calls wake whenever the stream brings messages (or a settled one
// frees its aggregate's next), until ctx is done. It does not read the
// stream itself: [Source.Run] does.
func (s *Source) Listen(ctx context.Context, wake func()) error {
	s.mu.Lock()
	id := s.nextWake
	s.nextWake++
	s.wakes[id] = wake
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	delete(s.wakes, id)
	s.mu.Unlock()
	return nil
}

func (s *Source) wakeAllLocked() {
	for _, w := range s.wakes {
		w()
	}
	select {
	case s.room <- struct{}{}:
	default:
	}
}

// noFallback is the fallback of a source without one: it has claimed
// nothing, so nothing is ever routed to it.
type noFallback struct{ outbox.Store }

func (noFallback) Ack(context.Context, outbox.AckParams) (int, error) {
	return 0, errors.New("pgcdc: settle of messages this source did not hand out")
}
func (noFallback) Reschedule(context.Context, outbox.RescheduleParams) error {
	return errors.New("pgcdc: settle of messages this source did not hand out")
}
func (noFallback) Kill(context.Context, outbox.KillParams) error {
	return errors.New("pgcdc: settle of messages this source did not hand out")
}

// splitTable splits a table name at its first dot: schema and name, or the
// name alone.
func splitTable(name string) []string { return strings.SplitN(name, ".", 2) }
