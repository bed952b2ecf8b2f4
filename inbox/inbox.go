package inbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox"
)

// ErrNoMessageID is returned (wrapped) by [Inbox.Process] for a message
// without an id, or with one longer than MaxMessageIDLength: it cannot be
// deduplicated, so it is refused. Consumers dead-letter it at once.
var ErrNoMessageID = errors.New("inbox: message has no usable id")

// Outcome is what Process did with a message.
type Outcome int

// The outcomes of [Inbox.Process].
const (
	// Processed: the handler ran and its transaction, with the inbox row, committed.
	Processed Outcome = iota + 1
	// Duplicate: the message had already been processed; the handler did not run.
	Duplicate
)

// String returns processed, duplicate or the number.
func (o Outcome) String() string {
	switch o {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Handler applies a message's effect with tx, the transaction that also
// records the message in the inbox. It must do its database work through tx
// and must not commit or roll it back. Returning an error rolls back both,
// so the message counts as not processed and can be retried.
type Handler func(ctx context.Context, tx *sql.Tx, msg *outbox.Message) error

// HandlerError is the error Process returns when the handler failed; the
// transaction was rolled back and nothing was recorded. Errors of the inbox's
// own statements (the database is down, the commit failed) are not
// HandlerErrors, so a consumer can tell a poison message from an outage.
type HandlerError struct {
	Err error
}

func (e *HandlerError) Error() string { return "inbox: handler: " + e.Err.Error() }

// Unwrap returns the handler's error.
func (e *HandlerError) Unwrap() error { return e.Err }

// Event describes one call of Process, for [Hook].
type Event struct {
	Message *outbox.Message
	Outcome Outcome // 0 when Err is set
	Err     error
	// FastPath is true when the pre-filter recognised the duplicate and the
	// database was not asked.
	FastPath bool
	Duration time.Duration
}

// Hook observes the inbox. OnProcess is called after every Process, from
// the goroutine that called it.
type Hook interface {
	OnProcess(Event)
}

//go:embed migrations
var migrations embed.FS

// transientTries bounds how often Process repeats its transaction when the
// inbox's own insert hit a deadlock, a serialization failure or a busy database.
const transientTries = 5

// Inbox deduplicates messages for one consumer: [Inbox.Process] records each
// message's id in the inbox table in the same transaction as the handler's
// effect, so the effect happens once however often the message is delivered.
// An Inbox is safe for concurrent use, and any number of instances (in one
// process or many) may share a table.
type Inbox struct {
	db      *sql.DB
	dialect Dialect
	cfg     config
	log     *slog.Logger
	table   ident
	q       queries
	// filterOffUntil is the UnixNano time until which the filter is bypassed.
	filterOffUntil atomic.Int64
}

// queries are the statements of one inbox, built once.
type queries struct {
	insert, purge                 string
	seqUpdate, seqInsert, seqRead string
}

// New returns an inbox on db for the given dialect. It does not touch the
// database; call [Inbox.Migrate] to create the tables. It returns an error
// naming every invalid option. It panics if db is nil, a programmer error.
// The inbox never closes db.
//
// For PostgreSQL through a pgx pool, pass stdlib.OpenDBFromPool(pool)
// (github.com/jackc/pgx/v5/stdlib).
func New(db *sql.DB, dialect Dialect, opts ...Option) (*Inbox, error) {
	if db == nil {
		panic("inbox: New with a nil *sql.DB")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	var errs []error
	if !dialect.valid() {
		errs = append(errs, fmt.Errorf("unknown dialect %q (want %q, %q or %q)", dialect, Postgres, MySQL, SQLite))
	}
	errs = append(errs, cfg.validate())
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("inbox: new: %w", err)
	}
	table, _ := parseIdent(cfg.table, true) // validated above
	in := &Inbox{db: db, dialect: dialect, cfg: cfg, table: table}
	in.log = cfg.logger.With("component", "inbox", attrConsumer, cfg.consumer)
	in.q = buildQueries(dialect, table)
	return in, nil
}

func buildQueries(d Dialect, table ident) queries {
	t, s := d.quote(table), d.quote(table.with("_seq"))
	var q queries
	const cols = " (consumer, message_id, processed_at) VALUES "
	switch d {
	case MySQL:
		// A plain insert: a duplicate fails with 1062 after waiting for the
		// transaction that holds the key (INSERT IGNORE would also hide
		// other errors).
		q.insert = "INSERT INTO " + t + cols + "(?, ?, ?)"
		q.purge = "DELETE FROM " + t + " WHERE consumer = ? AND processed_at < ? LIMIT ?"
		q.seqInsert = "INSERT INTO " + s + " (consumer, aggregate, last_seq, updated_at) VALUES (?, ?, ?, ?)"
	default:
		q.insert = "INSERT INTO " + t + cols + "(" + d.phs(1, 3) + ") ON CONFLICT (consumer, message_id) DO NOTHING"
		q.purge = "DELETE FROM " + t + " WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM " + t +
			" WHERE consumer = " + d.ph(1) + " AND processed_at < " + d.ph(2) + " LIMIT " + d.ph(3) + ")"
		q.seqInsert = "INSERT INTO " + s + " (consumer, aggregate, last_seq, updated_at) VALUES (" + d.phs(1, 4) +
			") ON CONFLICT (consumer, aggregate) DO NOTHING"
	}
	q.seqUpdate = "UPDATE " + s + " SET last_seq = " + d.ph(1) + ", updated_at = " + d.ph(2) +
		" WHERE consumer = " + d.ph(3) + " AND aggregate = " + d.ph(4) + " AND last_seq = " + d.ph(5)
	q.seqRead = "SELECT last_seq FROM " + s + " WHERE consumer = " + d.ph(1) + " AND aggregate = " + d.ph(2)
	if d != SQLite {
		q.seqRead += " FOR UPDATE" // read the latest committed value, not the transaction's snapshot
	}
	return q
}

// Consumer returns the consumer name the inbox records messages under.
func (in *Inbox) Consumer() string { return in.cfg.consumer }

// Dialect returns the inbox's dialect.
func (in *Inbox) Dialect() Dialect { return in.dialect }

// Migrate creates the inbox table, its index and the sequence guard's table
// when they do not exist. It is idempotent and safe to run from several
// processes at once.
func (in *Inbox) Migrate(ctx context.Context) error {
	stmts, err := migrationStatements(in.dialect, in.table)
	if err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("inbox: migrate: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if in.dialect == Postgres {
		// DDL is transactional in PostgreSQL; the lock makes concurrent
		// CREATE ... IF NOT EXISTS safe (they can otherwise collide on the catalog).
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext('outboxkit/inbox migrate'))"); err != nil {
			return fmt.Errorf("inbox: migrate: lock: %w", err)
		}
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("inbox: migrate: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("inbox: migrate: commit: %w", err)
	}
	in.log.LogAttrs(ctx, slog.LevelInfo, "inbox migrated", slog.String("table", in.cfg.table))
	return nil
}

// Schema returns the statements Migrate runs, with the table names filled
// in, for teams that apply migrations with their own tool. Each statement is
// idempotent (IF NOT EXISTS).
func (in *Inbox) Schema() ([]string, error) {
	return migrationStatements(in.dialect, in.table)
}

// migrationStatements reads the dialect's embedded migrations and fills in
// the table names.
func migrationStatements(d Dialect, table ident) ([]string, error) {
	dir := "migrations/" + string(d)
	entries, err := migrations.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	// PostgreSQL puts an index in its table's schema and takes a bare name;
	// SQLite takes the schema on the index name and a bare table name.
	idx := table.with("_processed_idx")
	index := d.quoteName(idx.name)
	if d == SQLite {
		index = d.quote(idx)
	}
	r := strings.NewReplacer(
		"{{table}}", d.quote(table),
		"{{tablename}}", d.quoteName(table.name),
		"{{seqtable}}", d.quote(table.with("_seq")),
		"{{index}}", index,
	)
	var stmts []string
	for _, e := range entries { // ReadDir sorts by name: 0001_..., 0002_...
		b, err := migrations.ReadFile(dir + "/" + e.Name())
		if err != nil {
			return nil, err
		}
		for _, s := range strings.Split(r.Replace(string(b)), ";\n") {
			if s = stripComments(s); s != "" {
				stmts = append(stmts, s)
			}
		}
	}
	return stmts, nil
}

// stripComments drops whole-line -- comments and surrounding space.
func stripComments(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return strings.TrimSpace(b.String())
}

// Process runs h for msg exactly once per message id and consumer, however
// often msg is delivered and by however many consumer instances at once.
//
// It opens a transaction, inserts (consumer, msg.MessageID) into the inbox
// table, runs h with the transaction and commits. If the row exists the
// message is a duplicate: Process rolls back and returns Duplicate without
// running h. (When another transaction is inserting the same row, the insert
// waits for it to end: if it committed, this copy is a duplicate; if it
// rolled back, this copy runs h.) If h fails, Process rolls back both
// the inbox row and h's work and returns a *[HandlerError], so the message
// can be retried. Any other error (the database is unreachable, the commit
// failed) means the outcome is unknown: acknowledge nothing and let the
// message come again; the inbox then tells whether it committed.
//
// With a pre-filter (WithFilter), a message the filter knows was committed
// returns Duplicate without touching the database.
//
// The message id is msg.MessageID (consumers fill it from the broker's
// headers); a message without one is refused with an error matching
// [ErrNoMessageID]. Process is safe for concurrent use.
func (in *Inbox) Process(ctx context.Context, msg *outbox.Message, h Handler) (Outcome, error) {
	start := time.Now()
	out, fast, err := in.process(ctx, msg, h)
	ev := Event{Message: msg, Outcome: out, Err: err, FastPath: fast, Duration: time.Since(start)}
	for _, hk := range in.cfg.hooks {
		hk.OnProcess(ev)
	}
	return out, err
}

func (in *Inbox) process(ctx context.Context, msg *outbox.Message, h Handler) (Outcome, bool, error) {
	if msg == nil || msg.MessageID == "" || len(msg.MessageID) > MaxMessageIDLength {
		return 0, false, outbox.Permanent(ErrNoMessageID)
	}
	if h == nil {
		panic("inbox: Process with a nil Handler")
	}
	id := msg.MessageID
	var token string
	if f := in.filterIfOn(); f != nil {
		var done bool
		var err error
		in.callFilter(ctx, "claim", func(fctx context.Context) error {
			done, token, err = f.Claim(fctx, in.cfg.consumer, id)
			return err
		})
		if err == nil && done {
			in.log.LogAttrs(ctx, slog.LevelDebug, "duplicate skipped by pre-filter", slog.String(attrMessageID, id))
			return Duplicate, true, nil
		}
	}

	out, err := in.processTx(ctx, msg, h)

	if f := in.filterIfOn(); f != nil {
		switch {
		case err == nil:
			// Committed now or before: only now may the filter call it done.
			in.callFilter(ctx, "done", func(fctx context.Context) error { return f.Done(fctx, in.cfg.consumer, id) })
		case token != "":
			in.callFilter(ctx, "release", func(fctx context.Context) error {
				return f.Release(fctx, in.cfg.consumer, id, token)
			})
		}
	}
	return out, false, err
}

// processTx runs the transaction, repeating it when the inbox's own insert
// lost a deadlock or a serialization conflict (before the handler ran).
func (in *Inbox) processTx(ctx context.Context, msg *outbox.Message, h Handler) (Outcome, error) {
	wait := 5 * time.Millisecond
	for try := 1; ; try++ {
		out, retry, err := in.once(ctx, msg, h)
		if !retry || try == transientTries || ctx.Err() != nil {
			return out, err
		}
		in.log.LogAttrs(ctx, slog.LevelDebug, "inbox insert conflicted, retrying",
			slog.String(attrMessageID, msg.MessageID), slog.String(attrError, err.Error()))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return out, err
		case <-t.C:
		}
		wait *= 2
	}
}

// once runs one transaction. retry reports an error worth repeating.
func (in *Inbox) once(ctx context.Context, msg *outbox.Message, h Handler) (out Outcome, retry bool, err error) {
	tx, err := in.db.BeginTx(ctx, in.cfg.txOptions)
	if err != nil {
		return 0, in.dialect.classify(err) == errTransient, fmt.Errorf("inbox: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback() // also on a panic in h
		}
	}()

	fresh, err := in.record(ctx, tx, msg.MessageID)
	if err != nil {
		return 0, in.dialect.classify(err) == errTransient, fmt.Errorf("inbox: record %s: %w", msg.MessageID, err)
	}
	if !fresh {
		in.log.LogAttrs(ctx, slog.LevelDebug, "duplicate skipped", slog.String(attrMessageID, msg.MessageID))
		return Duplicate, false, nil
	}
	if err := h(ctx, tx, msg); err != nil {
		return 0, false, &HandlerError{Err: err}
	}
	if err := tx.Commit(); err != nil {
		committed = true // Rollback after a failed Commit only returns ErrTxDone
		return 0, false, fmt.Errorf("inbox: commit %s: %w", msg.MessageID, err)
	}
	committed = true
	return Processed, false, nil
}

// record inserts the inbox row and reports whether it is new. A duplicate is
// detected by the primary key, never by a read before the insert.
func (in *Inbox) record(ctx context.Context, tx *sql.Tx, id string) (bool, error) {
	now := in.dialect.timeValue(in.cfg.now())
	res, err := tx.ExecContext(ctx, in.q.insert, in.cfg.consumer, id, now)
	if err != nil {
		if in.dialect.classify(err) == errUnique {
			return false, nil
		}
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// filterIfOn returns the filter unless there is none or it is cooling down.
func (in *Inbox) filterIfOn() Filter {
	if in.cfg.filter == nil || time.Now().UnixNano() < in.filterOffUntil.Load() {
		return nil
	}
	return in.cfg.filter
}

// callFilter runs one filter call under the filter timeout. A failure turns
// the filter off for the cooldown; the transition is logged once.
func (in *Inbox) callFilter(ctx context.Context, op string, call func(context.Context) error) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.cfg.filterTimeout)
	err := call(fctx)
	cancel()
	if err == nil {
		return
	}
	until := time.Now().Add(in.cfg.filterCooldown).UnixNano()
	prev := in.filterOffUntil.Swap(until)
	if prev < time.Now().UnixNano() { // it was on: log the switch, not every failure
		in.log.LogAttrs(ctx, slog.LevelWarn, "pre-filter failed, bypassing it",
			slog.String("op", op), slog.String(attrError, err.Error()),
			slog.Duration(attrDelay, in.cfg.filterCooldown))
	}
}
