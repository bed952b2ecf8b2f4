package pgcdc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/internal/mediatype"
)

// SQLSTATE codes the stream tells apart.
const (
	codeObjectInUse      = "55006" // the slot is active in another process
	codeUndefinedObject  = "42704" // no such slot
	codeDuplicateObject  = "42710" // the slot exists (made meanwhile by another process)
	codeUniqueViolation  = "23505" // a catalog row of that name was inserted meanwhile
	codeInsufficientPriv = "42501" // the role lacks REPLICATION
	codeInvalidAuth      = "28000" // pg_hba refuses replication connections
)

// Run reads the stream until ctx is done, then returns nil. It connects,
// creates the publication and the slot when they are missing (see
// WithCreateSlot), starts replication from the slot's confirmed position
// and feeds the window; while it cannot (the database is down, the slot is
// active in another process, replication is refused), it tries again every
// retry interval. Only one Run per Source.
func (s *Source) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := s.stream(ctx)
		s.mu.Lock()
		if s.streaming {
			s.streaming = false
			s.downSince = time.Now()
		}
		s.mu.Unlock()
		if ctx.Err() != nil {
			break
		}
		s.classify(ctx, err)
		t := time.NewTimer(s.cfg.retryInterval)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// classify records what an ended stream means for the mode, and logs it.
func (s *Source) classify(ctx context.Context, err error) {
	var pgErr *pgconn.PgError
	code := ""
	if errors.As(err, &pgErr) {
		code = pgErr.Code
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch code {
	case codeObjectInUse:
		if !s.standby {
			s.log.LogAttrs(ctx, slog.LevelInfo, "replication slot active in another process, standing by",
				slog.String("error", err.Error()))
		}
		s.standby = true
		return
	case codeInsufficientPriv, codeInvalidAuth, codeUndefinedObject, "55000": // 55000: slot invalidated
		s.refused = true
	}
	s.standby = false
	s.log.LogAttrs(ctx, slog.LevelWarn, "change stream down, retrying", slog.String("error", err.Error()),
		slog.Duration("retry_in", s.cfg.retryInterval), slog.Bool("replication_refused", s.refused))
}

// stream is one replication connection, from connect to its end.
func (s *Source) stream(ctx context.Context) error {
	conn, err := pgconn.ConnectConfig(ctx, s.conn)
	if err != nil {
		return fmt.Errorf("connect for replication: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if err := s.table.columns(ctx); err != nil {
		return err
	}
	if s.dead != nil {
		if err := s.dead.columns(ctx); err != nil {
			return err
		}
	}
	if s.cfg.createSlot {
		if err := s.ensureSlot(ctx, conn); err != nil {
			return err
		}
	}
	var start pglogrepl.LSN
	err = s.pool.QueryRow(ctx, `SELECT COALESCE(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1`,
		s.cfg.slot).Scan(&start)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read the slot's position: %w", err)
	}
	marks := false
	if s.cfg.tableAttempts && !s.table.logOnly { // a log-only table counts in memory: no mark
		marks = s.table.ensureHanded(ctx, s.log)
	}
	args := []string{"proto_version '1'", "publication_names '" + s.cfg.publication + "'"}
	if err := pglogrepl.StartReplication(ctx, conn, s.cfg.slot, 0,
		pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args}); err != nil {
		return fmt.Errorf("start replication: %w", err)
	}
	// What earlier readers of the slot may have handed out without
	// counting it in the table, read once the slot is ours (see handedMark).
	var handed pos
	if marks {
		if handed, err = s.table.handedMark(ctx, s.cfg.slot); err != nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "cannot read the handed-out mark, counting every attempt in the table",
				slog.String("error", err.Error()))
			marks = false
		}
	}
	s.mu.Lock()
	s.streaming, s.standby, s.refused = true, false, false
	s.marks, s.handedAtStart = marks, handed
	s.win.reset()
	if start > s.win.confirmed {
		s.win.confirmed = start
	}
	s.mu.Unlock()
	s.log.LogAttrs(ctx, slog.LevelInfo, "change stream started", slog.String("from_lsn", start.String()))
	r := &reader{s: s, conn: conn, rels: make(map[uint32]*relation), types: pgtype.NewMap()}
	return r.run(ctx)
}

// ensureSlot creates the publication and the slot when they are missing,
// and the slot again when the server invalidated it. A new slot starts at
// the current end of the log: rows written before it that are still
// pending are polled (the catch-up) before streaming takes over.
func (s *Source) ensureSlot(ctx context.Context, conn *pgconn.PgConn) error {
	var walStatus *string
	err := s.pool.QueryRow(ctx, `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.slot).Scan(&walStatus)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("look for the slot: %w", err)
	case walStatus != nil && *walStatus == WALLost:
		s.log.Error("replication slot invalidated (max_slot_wal_keep_size), creating it again; messages whose rows the writer deleted and that only the lost log held cannot be recovered")
		if err := pglogrepl.DropReplicationSlot(ctx, conn, s.cfg.slot, pglogrepl.DropReplicationSlotOptions{}); err != nil {
			return fmt.Errorf("drop the invalidated slot: %w", err)
		}
	}
	// What outbox migrate --cdc runs: the publication and the slot, each
	// only when missing, with the server's settings checked first.
	res, err := Setup(ctx, s.pool, s.cfg.table, s.cfg.slot, s.cfg.publication)
	if err != nil || !res.CreatedSlot {
		return err
	}
	if s.table.logOnly {
		s.log.Warn("replication slot created; a log-only table cannot be polled, so messages written before it are not read")
		return nil
	}
	// Every row committed before the slot's start is visible now; those
	// still pending are polled before the stream is trusted.
	upTo, err := s.table.maxID(ctx)
	if err != nil {
		return err
	}
	s.log.LogAttrs(ctx, slog.LevelWarn, "replication slot created; polling rows written before it",
		slog.Int64("up_to_id", upTo))
	if upTo > 0 {
		s.mu.Lock()
		s.catchUp = upTo
		s.mu.Unlock()
	}
	return nil
}

func isCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// reader decodes one replication connection's messages into the window.
type reader struct {
	s     *Source
	conn  *pgconn.PgConn
	rels  map[uint32]*relation
	types *pgtype.Map
	cur   *txn       // the transaction being read, nil between transactions
	added int        // inserts read since the last wake
	tuple []tupleCol // the last insert's columns, reused
}

// relation is what the stream said about a table's columns, with each
// column's contract name and, for a column a message needs, its bit in
// decode's mask (required).
type relation struct {
	ours  bool
	cols  []*pglogrepl.RelationMessageColumn
	names []string
	need  []uint8
}

// required are the columns a message cannot do without, in the order
// decode reports them missing.
var required = [...]string{colmap.ID, colmap.MessageID, colmap.AggregateType, colmap.AggregateID, colmap.EventType, colmap.Payload}

// newRelation keeps what r needs of m: whether it is the outbox table, and
// its columns' contract names.
func (r *reader) newRelation(m *pglogrepl.RelationMessage) *relation {
	rel := &relation{ours: r.ours(m), cols: m.Columns, names: make([]string, len(m.Columns)), need: make([]uint8, len(m.Columns))}
	for i, c := range m.Columns {
		rel.names[i] = r.s.table.contract(c.Name)
		for j, name := range required {
			if rel.names[i] == name {
				rel.need[i] = 1 << j
			}
		}
	}
	return rel
}

func (r *reader) run(ctx context.Context) error {
	s := r.s
	nextStatus := time.Now()
	// One context for the reads up to the next status update, not one a
	// message: a deadline costs a timer.
	read := struct {
		ctx  context.Context
		stop context.CancelFunc
	}{ctx, func() {}}
	defer func() { read.stop() }()
	for {
		if !time.Now().Before(nextStatus) {
			if err := r.sendStatus(ctx); err != nil {
				return err
			}
			nextStatus = time.Now().Add(s.cfg.statusInterval)
			read.stop()
			read.ctx, read.stop = context.WithDeadline(ctx, nextStatus)
		}
		s.mu.Lock()
		full := s.win.unsettled() >= s.cfg.maxWindow
		s.mu.Unlock()
		if full { // let the relay settle some: the server keeps the rest
			t := time.NewTimer(time.Until(nextStatus))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-s.room:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		raw, err := r.conn.ReceiveMessage(read.ctx)
		if err != nil {
			if pgconn.Timeout(err) && ctx.Err() == nil {
				continue
			}
			return fmt.Errorf("read the stream: %w", err)
		}
		switch msg := raw.(type) {
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				k, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("read a keepalive: %w", err)
				}
				if r.cur == nil {
					s.mu.Lock()
					s.win.idleAt(k.ServerWALEnd)
					s.mu.Unlock()
				}
				if k.ReplyRequested {
					nextStatus = time.Now()
				}
			case pglogrepl.XLogDataByteID:
				x, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("read log data: %w", err)
				}
				if err := r.handle(x.WALData); err != nil {
					return err
				}
			}
		}
	}
}

// sendStatus confirms the window's confirmable position to the server.
func (r *reader) sendStatus(ctx context.Context) error {
	r.s.mu.Lock()
	lsn := r.s.win.confirmed
	r.s.mu.Unlock()
	if lsn == 0 {
		return nil
	}
	if err := pglogrepl.SendStandbyStatusUpdate(ctx, r.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: lsn}); err != nil {
		return fmt.Errorf("confirm position %s: %w", lsn, err)
	}
	r.s.confirmed.Store(uint64(lsn))
	return nil
}

// handle decodes one pgoutput message. Inserts, nearly all of the stream,
// are read by insert; the rest by pglogrepl.
func (r *reader) handle(data []byte) error {
	if len(data) > 0 && data[0] == byte(pglogrepl.MessageTypeInsert) {
		return r.insert(data[1:])
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("decode pgoutput: %w", err)
	}
	s := r.s
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		r.rels[m.RelationID] = r.newRelation(m)
	case *pglogrepl.BeginMessage:
		s.mu.Lock()
		r.cur = s.win.begin()
		r.cur.xid, r.cur.final = m.Xid, m.FinalLSN
		s.mu.Unlock()
	case *pglogrepl.CommitMessage:
		if r.cur == nil {
			return nil
		}
		s.mu.Lock()
		s.win.commit(r.cur, m.TransactionEndLSN)
		r.cur, r.added = nil, 0
		s.wakeAllLocked()
		s.mu.Unlock()
	}
	return nil
}

// insert adds the row of an insert message (after its type byte) to the
// window when it is the outbox table's.
func (r *reader) insert(data []byte) error {
	relID, cols, err := readInsert(data, r.tuple[:0])
	if err != nil {
		return fmt.Errorf("decode pgoutput: %w", err)
	}
	r.tuple = cols
	s := r.s
	rel := r.rels[relID]
	if rel == nil || !rel.ours || r.cur == nil {
		return nil
	}
	e, keep := r.decode(rel, cols)
	if !keep {
		return nil
	}
	if s.table.logOnly { // no row to look up or settle
		e.checked = true
	}
	s.mu.Lock()
	s.win.add(r.cur, e)
	e.prior = !s.marks || !e.pos().after(s.handedAtStart)
	if r.added++; r.added >= 100 {
		r.added = 0
		s.wakeAllLocked()
	}
	s.mu.Unlock()
	return nil
}

// ours reports whether a relation is the outbox table.
func (r *reader) ours(m *pglogrepl.RelationMessage) bool {
	t := r.s.table
	if m.RelationName != t.name {
		return false
	}
	return t.schema == "" || m.Namespace == t.schema
}

// contentError says what is wrong with a decoded row's content type and
// payload: a content type that is not a media type, or payload_bytes
// (fromBytes) that are not JSON under a JSON content type. The payload
// column is jsonb, so what it holds is JSON.
func contentError(m *outbox.Message, fromBytes bool) error {
	if m.ContentType != "" {
		if mediatype.Check(m.ContentType) != nil {
			return fmt.Errorf("content_type %q is not a media type", m.ContentType)
		}
	}
	if fromBytes && m.JSONPayload() && !json.Valid(m.Payload) {
		return errors.New("payload_bytes is not valid JSON, which the content type requires")
	}
	return nil
}

// col is one column of an inserted row, in text format. data is the
// stream's buffer, valid until the next message is read: what the message
// keeps of it is copied.
type col struct {
	name string // the contract's name
	typ  uint32 // the column's type OID
	data []byte
}

// column sets what column c of a row says on e's message, the row's status
// in status and payload_bytes in raw; a value it cannot read makes e bad.
func (r *reader) column(e *entry, c col, status *int64, raw *[]byte) {
	m := e.msg
	switch c.name {
	case "id":
		m.RowID, _ = strconv.ParseInt(string(c.data), 10, 64)
	case "message_id":
		m.MessageID = string(c.data)
	case "aggregate_type":
		m.AggregateType = string(c.data)
	case "aggregate_id":
		m.AggregateID = string(c.data)
	case "event_type":
		m.EventType = string(c.data)
	case "payload":
		m.Payload = json.RawMessage(bytes.Clone(c.data))
	case "status":
		*status, _ = strconv.ParseInt(string(c.data), 10, 16)
	case "topic":
		m.Topic = string(c.data)
	case "partition_key":
		m.PartitionKey = string(c.data)
	case "content_type":
		m.ContentType = string(c.data)
	case "payload_bytes":
		if err := r.types.Scan(c.typ, pgtype.TextFormatCode, c.data, raw); err != nil {
			e.bad = fmt.Errorf("row %d: payload_bytes: %w", m.RowID, err)
		}
	case "headers":
		if err := json.Unmarshal(c.data, &m.Headers); err != nil {
			e.bad = fmt.Errorf("row %d: headers are not a JSON object of strings: %w", m.RowID, err)
		}
	case "created_at":
		var t time.Time
		if err := r.types.Scan(c.typ, pgtype.TextFormatCode, c.data, &t); err == nil {
			m.CreatedAt = t
		}
	case "deliver_at", "expires_at":
		var t pgtype.Timestamptz
		if err := r.types.Scan(c.typ, pgtype.TextFormatCode, c.data, &t); err != nil {
			e.bad = fmt.Errorf("row %d: %s: %w", m.RowID, c.name, err)
		} else if t.Valid && t.InfinityModifier == pgtype.Finite {
			if c.name == "deliver_at" {
				m.DeliverAt = t.Time
			} else {
				m.ExpiresAt = t.Time
			}
		}
	}
}

// decode turns an inserted row into an entry. keep is false for a row that
// is not pending when written (a dead row the source itself recorded).
func (r *reader) decode(rel *relation, cols []tupleCol) (e *entry, keep bool) {
	m := &outbox.Message{}
	e = &entry{msg: m}
	var missing []string
	var have uint8 // the required columns that are not NULL, by their bits
	status := int64(0)
	var raw []byte // payload_bytes: the payload when set
	for i, c := range cols {
		if i >= len(rel.cols) {
			break
		}
		if c.kind != pglogrepl.TupleDataTypeText {
			continue // NULL (or an unchanged TOAST value, which an insert never has)
		}
		have |= rel.need[i]
		r.column(e, col{name: rel.names[i], typ: rel.cols[i].DataType, data: c.data}, &status, &raw)
	}
	if status != 0 {
		return nil, false
	}
	// A delayed message waits in the window, unconfirmed, until its time
	// (docs/cdc.md: the slot keeps the log from it on until then); the
	// relay kills an expired one when it claims it.
	if m.DeliverAt.After(time.Now()) {
		e.state, e.due = entryWaiting, m.DeliverAt
	}
	if raw != nil {
		m.Payload = raw // payload holds JSON null (docs/table-contract.md)
	}
	if err := contentError(m, raw != nil); err != nil && e.bad == nil {
		e.bad = fmt.Errorf("row %d: %w", m.RowID, err)
	}
	for j, c := range required {
		if c == colmap.ID && r.s.table.logOnly {
			continue // no row id: the message lives in the log
		}
		if have&(1<<j) == 0 {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		e.bad = fmt.Errorf("row %d: NULL in %v", m.RowID, missing)
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = time.Now()
	}
	return e, true
}
