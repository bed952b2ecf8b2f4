package pgcdc

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// maxName is the longest identifier PostgreSQL keeps (NAMEDATALEN - 1).
const maxName = 63

// Querier is what the slot functions need of a database handle: a
// *pgxpool.Pool, a *pgx.Conn and a pgx.Tx are each one. Setup must not run
// in a transaction that has written (PostgreSQL refuses to create a slot
// there): give it a pool or a connection.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Errors of [Setup] and [DropSlot], matched with errors.Is. Each error
// returned carries the fix in its message.
var (
	// ErrWALLevel: the server's wal_level is not logical.
	ErrWALLevel = errors.New("pgcdc: wal_level is not logical")
	// ErrNoReplication: the role lacks the REPLICATION attribute.
	ErrNoReplication = errors.New("pgcdc: the role lacks REPLICATION")
	// ErrNoFreeSlot: every one of max_replication_slots is in use.
	ErrNoFreeSlot = errors.New("pgcdc: no free replication slot")
	// ErrSlotActive: a process streams the slot, so it cannot be dropped.
	ErrSlotActive = errors.New("pgcdc: replication slot is active")
	// ErrSlotNotFound: no replication slot has the name.
	ErrSlotNotFound = errors.New("pgcdc: no such replication slot")
)

// nonSlotChar is what SlotName replaces: PostgreSQL allows only lower-case
// letters, digits and underscores in a slot's name.
var nonSlotChar = regexp.MustCompile(`[^a-z0-9_]`)

// slotNameRE is a valid replication slot name.
var slotNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// SlotName returns the default replication slot of table (name or
// schema.name): "outbox_" and the table's name, each character that a slot
// name cannot hold (anything but a-z, 0-9 and _) replaced by "_", so
// shop.outbox_message gives outbox_shop_outbox_message, cut to 63 bytes.
// Two tables whose names agree in their first 56 bytes get the same default:
// name their slots (cdc_slot) instead.
func SlotName(table string) string {
	return cut("outbox_"+nonSlotChar.ReplaceAllString(table, "_"), maxName)
}

// PublicationName returns the default publication of table: its
// [SlotName] followed by "_pub", cut to 63 bytes.
func PublicationName(table string) string { return cut(SlotName(table)+"_pub", maxName) }

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// SetupResult says what [Setup] did.
type SetupResult struct {
	// CreatedPublication is true when Setup created the publication, false
	// when it was there already.
	CreatedPublication bool
	// CreatedSlot is true when Setup created the slot, false when it was
	// there already.
	CreatedSlot bool
	// LSN is where a created slot starts (its consistent point); "" when
	// the slot was there already.
	LSN string
	// CreatedMarkTable is true when Setup created the side table
	// [MarkTable] in the outbox table's schema, false when it was there.
	CreatedMarkTable bool
}

// Setup makes table ready for CDC: it creates the publication (FOR TABLE
// table WITH (publish = 'insert'): inserts of that table only) and the
// logical replication slot (plugin pgoutput), and the side table
// [MarkTable] in the table's schema, unless they exist, so that
// running it again, or from several processes at once, is safe. A slot made
// by Setup holds write-ahead log from that moment on: every insert committed
// after it returns is in the stream.
//
// Before it creates anything it checks the server and the role, and refuses
// with the fix spelled out: wal_level not logical ([ErrWALLevel]), a role
// without REPLICATION ([ErrNoReplication]), or, when the slot must be
// created, no free slot left under max_replication_slots ([ErrNoFreeSlot]).
// It also refuses a publication of that name that does not publish the
// table's inserts, and a slot of that name that is not a pgoutput slot of
// this database. Creating the slot waits for the transactions running at
// that moment to end; ctx bounds the wait.
func Setup(ctx context.Context, db Querier, table, slot, publication string) (SetupResult, error) {
	var res SetupResult
	tableIdent, err := quoteTable(table)
	if err != nil {
		return res, err
	}
	if err := checkNames(slot, publication); err != nil {
		return res, err
	}
	srv, err := readServer(ctx, db, slot)
	if err != nil {
		return res, err
	}
	if err := srv.check(); err != nil {
		return res, err
	}
	if res.CreatedPublication, err = ensurePublication(ctx, db, tableIdent, table, publication); err != nil {
		return res, err
	}
	if res.CreatedMarkTable, err = ensureMarkTable(ctx, db, table); err != nil {
		return res, err
	}
	if srv.slotExists {
		return res, checkSlot(ctx, db, slot)
	}
	var lsn string
	err = db.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, slot).Scan(&lsn)
	if isDuplicate(err) { // another Setup created it meanwhile
		return res, checkSlot(ctx, db, slot)
	}
	if err != nil {
		return res, fmt.Errorf("pgcdc: create replication slot %s: %w", slot, err)
	}
	res.CreatedSlot, res.LSN = true, lsn
	return res, nil
}

// ensureMarkTable creates the side table [MarkTable] in the schema of table
// (already checked by quoteTable) unless it exists, and reports whether it
// created it.
func ensureMarkTable(ctx context.Context, db Querier, table string) (bool, error) {
	schema, _, qualified := strings.Cut(table, ".")
	if !qualified {
		schema = ""
	}
	ident := markIdent(schema)
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, ident).Scan(&exists); err != nil {
		return false, fmt.Errorf("pgcdc: look up the mark table %s: %w", ident, err)
	}
	if exists {
		return false, nil
	}
	_, err := db.Exec(ctx, markDDL(ident))
	if err == nil {
		return true, nil
	}
	// Two runs at once may both pass IF NOT EXISTS; the loser fails on the
	// catalog's unique index although the table now exists.
	if qerr := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, ident).Scan(&exists); qerr == nil && exists {
		return false, nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege
		return false, fmt.Errorf("pgcdc: create the mark table %s: %w; grant the role CREATE on the schema", ident, err)
	}
	return false, fmt.Errorf("pgcdc: create the mark table %s: %w", ident, err)
}

// tablePart is one part of a table name, as pgstore accepts it.
var tablePart = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// quoteTable returns table (name or schema.name) quoted for SQL.
func quoteTable(table string) (string, error) {
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("pgcdc: table %q has more than two parts (use table or schema.table)", table)
	}
	for _, p := range parts {
		if !tablePart.MatchString(p) {
			return "", fmt.Errorf("pgcdc: table %q is not a valid name: each part must match %s", table, tablePart)
		}
	}
	return pgx.Identifier(parts).Sanitize(), nil
}

// checkNames checks a slot and a publication name before they reach the server.
func checkNames(slot, publication string) error {
	var errs []error
	if !slotNameRE.MatchString(slot) {
		errs = append(errs, fmt.Errorf("pgcdc: slot name %q: want 1 to 63 of a-z, 0-9 and _", slot))
	}
	if publication == "" || len(publication) > maxName {
		errs = append(errs, fmt.Errorf("pgcdc: publication name %q: want 1 to 63 bytes", publication))
	}
	return errors.Join(errs...)
}

// server is what Setup must know of the server and the role before it acts.
type server struct {
	walLevel    string
	role        string
	replication bool // the role has REPLICATION (or is a superuser)
	maxSlots    int  // max_replication_slots
	usedSlots   int  // slots that exist, of any kind and database
	slotExists  bool // the slot to set up exists
}

// serverSQL reads a server for readServer.
const serverSQL = `
SELECT current_setting('wal_level'),
       current_user::text,
       coalesce((SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user), false),
       current_setting('max_replication_slots')::int,
       (SELECT count(*) FROM pg_replication_slots)::int,
       EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`

func readServer(ctx context.Context, db Querier, slot string) (server, error) {
	var s server
	err := db.QueryRow(ctx, serverSQL, slot).Scan(&s.walLevel, &s.role, &s.replication, &s.maxSlots, &s.usedSlots, &s.slotExists)
	if err != nil {
		return s, fmt.Errorf("pgcdc: read wal_level, role and slots: %w", err)
	}
	return s, nil
}

// check refuses a server or role that cannot have the slot, saying how to fix it.
func (s server) check() error {
	var errs []error
	if s.walLevel != "logical" {
		errs = append(errs, fmt.Errorf("%w (it is %s): as a superuser run ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL",
			ErrWALLevel, s.walLevel))
	}
	if !s.replication {
		errs = append(errs, fmt.Errorf("%w (role %s): as a superuser run ALTER ROLE %s REPLICATION;",
			ErrNoReplication, s.role, pgx.Identifier{s.role}.Sanitize()))
	}
	if !s.slotExists && s.usedSlots >= s.maxSlots {
		errs = append(errs, fmt.Errorf("%w: all %d of max_replication_slots are in use: drop a slot nobody reads "+
			"(SELECT slot_name, active FROM pg_replication_slots; outbox cdc drop-slot) or raise max_replication_slots and restart PostgreSQL",
			ErrNoFreeSlot, s.maxSlots))
	}
	return errors.Join(errs...)
}

// publicationSQL reads the publication named $1 and whether it holds the table $2.
const publicationSQL = `
SELECT p.pubinsert,
       EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = to_regclass($2)) OR p.puballtables
FROM pg_publication p WHERE p.pubname = $1`

// ensurePublication creates the publication of table's inserts unless one
// of that name exists, and checks an existing one. It reports whether it
// created it.
func ensurePublication(ctx context.Context, db Querier, tableIdent, table, publication string) (bool, error) {
	pubIdent := pgx.Identifier{publication}.Sanitize()
	var regclass *string
	if err := db.QueryRow(ctx, `SELECT to_regclass($1)::text`, tableIdent).Scan(&regclass); err != nil {
		return false, fmt.Errorf("pgcdc: look up table %s: %w", table, err)
	}
	if regclass == nil {
		return false, fmt.Errorf("pgcdc: table %s does not exist: run outbox migrate first", table)
	}
	for range 2 { // a second look when another Setup created it meanwhile
		var inserts, hasTable bool
		err := db.QueryRow(ctx, publicationSQL, publication, tableIdent).Scan(&inserts, &hasTable)
		switch {
		case err == nil && !hasTable:
			return false, fmt.Errorf("pgcdc: publication %s exists but does not publish table %s: name another (cdc_publication) "+
				"or run ALTER PUBLICATION %s ADD TABLE %s;", publication, table, pubIdent, tableIdent)
		case err == nil && !inserts:
			return false, fmt.Errorf("pgcdc: publication %s does not publish inserts: run ALTER PUBLICATION %s SET (publish = 'insert');",
				publication, pubIdent)
		case err == nil:
			return false, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return false, fmt.Errorf("pgcdc: read publication %s: %w", publication, err)
		}
		_, err = db.Exec(ctx, "CREATE PUBLICATION "+pubIdent+" FOR TABLE "+tableIdent+" WITH (publish = 'insert')")
		if err == nil {
			return true, nil
		}
		if !isDuplicate(err) {
			return false, fmt.Errorf("pgcdc: create publication %s: %w", publication, err)
		}
	}
	return false, fmt.Errorf("pgcdc: publication %s: created and dropped meanwhile", publication)
}

// checkSlot refuses an existing slot that the relay cannot stream.
func checkSlot(ctx context.Context, db Querier, slot string) error {
	var kind, plugin, database string
	var here bool
	err := db.QueryRow(ctx, `
SELECT slot_type, coalesce(plugin, ''), coalesce(database, ''), database IS NOT DISTINCT FROM current_database()
FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&kind, &plugin, &database, &here)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgcdc: replication slot %s: dropped while being set up; run again", slot)
	}
	if err != nil {
		return fmt.Errorf("pgcdc: read replication slot %s: %w", slot, err)
	}
	if kind != "logical" || plugin != "pgoutput" || !here {
		return fmt.Errorf("pgcdc: replication slot %s exists but is a %s slot of plugin %q on database %q, not a pgoutput slot "+
			"of this database: name another (cdc_slot)", slot, kind, plugin, database)
	}
	return nil
}

// isDuplicate reports that the slot or publication exists: duplicate_object
// (42710), or unique_violation (23505) on the catalog's name index, which a
// CREATE PUBLICATION racing another one for the same name gets instead.
func isDuplicate(err error) bool {
	return isCode(err, codeDuplicateObject) || isCode(err, codeUniqueViolation)
}

// WAL statuses of a slot, as pg_replication_slots.wal_status reports them.
const (
	// WALReserved: the log the slot needs is within max_wal_size.
	WALReserved = "reserved"
	// WALExtended: the slot keeps log beyond max_wal_size, within
	// max_slot_wal_keep_size (or without a limit).
	WALExtended = "extended"
	// WALUnreserved: the slot needs log past max_slot_wal_keep_size; the
	// next checkpoint may remove it, and the slot is lost then.
	WALUnreserved = "unreserved"
	// WALLost: log the slot needs was removed; the slot cannot be streamed
	// any more.
	WALLost = "lost"
)

// SlotState is what [SlotStatus] reads of a replication slot.
type SlotState struct {
	// Slot is the slot's name.
	Slot string `json:"name"`
	// Exists is false when no slot has the name; the other fields are then zero.
	Exists bool `json:"exists"`
	// Active is true while a process streams the slot.
	Active bool `json:"active"`
	// ActivePID is the server process that streams the slot; 0 when none.
	ActivePID int `json:"active_pid,omitempty"`
	// WALStatus is WALReserved, WALExtended, WALUnreserved or WALLost.
	WALStatus string `json:"wal_status,omitempty"`
	// LagBytes is how far the log has moved past what the slot's reader
	// confirmed: pg_current_wal_lsn() - confirmed_flush_lsn. Nil when the
	// slot has confirmed nothing (or the server is a standby).
	LagBytes *int64 `json:"lag_bytes"`
	// SafeWALSize is how many more bytes of log can be written before the
	// slot is at risk of being lost (pg_replication_slots.safe_wal_size).
	// Nil when max_slot_wal_keep_size is -1 (no limit: the slot keeps log
	// until the disk is full) or the slot is lost.
	SafeWALSize *int64 `json:"safe_wal_size_bytes"`
}

// slotStatusSQL reads a slot for SlotStatus.
const slotStatusSQL = `
SELECT active, coalesce(active_pid, 0), coalesce(wal_status, ''),
       CASE WHEN confirmed_flush_lsn IS NOT NULL AND NOT pg_is_in_recovery()
            THEN pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint END,
       safe_wal_size
FROM pg_replication_slots WHERE slot_name = $1`

// SlotStatus reads the replication slot named slot. A slot that does not
// exist is no error: the result's Exists is false. It is one short query.
func SlotStatus(ctx context.Context, db Querier, slot string) (SlotState, error) {
	st := SlotState{Slot: slot}
	err := db.QueryRow(ctx, slotStatusSQL, slot).Scan(&st.Active, &st.ActivePID, &st.WALStatus, &st.LagBytes, &st.SafeWALSize)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("pgcdc: read replication slot %s: %w", slot, err)
	}
	st.Exists = true
	return st, nil
}

// DropSlot drops the replication slot named slot, deletes its row from
// every [MarkTable] of the database, and then, when publication is not "",
// the publication of that name (if it exists). It
// returns [ErrSlotNotFound] when there is no such slot (and then drops no
// publication), and [ErrSlotActive] when a process streams it: stop the
// relay first. The log the slot kept is freed at the next checkpoint.
// A relay still running with source cdc polls the table once its slot is
// gone, and creates the slot again if it may (see the relay's docs): drop a
// slot when no relay will read it any more.
func DropSlot(ctx context.Context, db Querier, slot, publication string) error {
	_, err := db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot)
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "42704": // undefined_object
		return fmt.Errorf("%w: %s", ErrSlotNotFound, slot)
	case errors.As(err, &pe) && pe.Code == "55006": // object_in_use
		return fmt.Errorf("%w: %s (%s): stop the relay that streams it first", ErrSlotActive, slot, pe.Message)
	case err != nil:
		return fmt.Errorf("pgcdc: drop replication slot %s: %w", slot, err)
	}
	if err := forgetMarks(ctx, db, slot); err != nil {
		return fmt.Errorf("pgcdc: %w (slot %s was dropped)", err, slot)
	}
	if publication == "" {
		return nil
	}
	if _, err := db.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{publication}.Sanitize()); err != nil {
		return fmt.Errorf("pgcdc: drop publication %s (slot %s was dropped): %w", publication, slot, err)
	}
	return nil
}

// marksSQL lists the quoted names of the database's mark tables.
const marksSQL = `SELECT coalesce(array_agg(quote_ident(n.nspname) || '.' || quote_ident(c.relname)), '{}')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = $1 AND c.relkind IN ('r', 'p')`

// forgetMarks deletes the rows of slot from every mark table of the
// database: a slot of that name made later starts without a mark.
func forgetMarks(ctx context.Context, db Querier, slot string) error {
	var idents []string
	if err := db.QueryRow(ctx, marksSQL, MarkTable).Scan(&idents); err != nil {
		return fmt.Errorf("list the mark tables: %w", err)
	}
	for _, ident := range idents {
		_, err := db.Exec(ctx, `DELETE FROM `+ident+` WHERE slot = $1`, slot)
		if err != nil && !isCode(err, codeUndefinedTable) { // a table dropped since the list holds no mark
			return fmt.Errorf("delete the slot's mark from %s: %w", ident, err)
		}
	}
	return nil
}

// StopStreaming ends the server process that streams the slot named slot
// (pg_terminate_backend of its active_pid, which needs superuser or
// pg_signal_backend) and waits, within ctx, until the slot reads inactive.
// It reports whether a process streamed it. The reader (a CDC relay) sees
// its connection closed and may take the slot again when it reconnects:
// stop the relays before [DropSlot].
func StopStreaming(ctx context.Context, db Querier, slot string) (bool, error) {
	var ended *bool
	err := db.QueryRow(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot).Scan(&ended)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pgcdc: end the stream of slot %s: %w", slot, err)
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		st, err := SlotStatus(ctx, db, slot)
		if err != nil {
			return true, err
		}
		if !st.Active {
			return true, nil
		}
		select {
		case <-ctx.Done():
			return true, fmt.Errorf("pgcdc: slot %s still streamed by process %d: %w", slot, st.ActivePID, ctx.Err())
		case <-t.C:
		}
	}
}
