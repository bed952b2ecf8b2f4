package pgstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

var _ outbox.TxInserter[*sql.Tx] = sqlInserter{}

// InsertTx inserts msgs in the caller's transaction tx with one statement,
// in the order given (so row ids follow it). It neither commits nor rolls
// back tx. Callers normally go through outbox.NewWriter(store).Write, which
// validates the messages first. Empty Topic and PartitionKey are stored as
// NULL; columns the table lacks are skipped. A MessageID already in the table
// fails the statement with an error matching [ErrDuplicate] (and, as with any
// failed statement, the transaction must then be rolled back).
func (s *Store) InsertTx(ctx context.Context, tx pgx.Tx, msgs []*outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	q, err := s.queriesFor(ctx, func(ctx context.Context, sql string, args ...any) scanner {
		return tx.QueryRow(ctx, sql, args...)
	})
	if err != nil {
		return err
	}
	sql, args, err := s.insertStatement(q, msgs)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, s.m.SQL(sql), args...)
	return insertError(len(msgs), err)
}

// SQLTx returns the Store's inserter for database/sql transactions, so that
// outbox.NewWriter(store.SQLTx()) gives a *outbox.Writer[*sql.Tx]. The
// transaction must come from the pgx driver for database/sql
// (github.com/jackc/pgx/v5/stdlib: sql.Open("pgx", dsn) or
// stdlib.OpenDBFromPool), which passes the statement's array parameters
// through. It behaves like [Store.InsertTx] and is safe for concurrent use.
func (s *Store) SQLTx() outbox.TxInserter[*sql.Tx] { return sqlInserter{s} }

type sqlInserter struct{ s *Store }

// InsertTx inserts msgs in tx with one statement, like [Store.InsertTx].
func (i sqlInserter) InsertTx(ctx context.Context, tx *sql.Tx, msgs []*outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	q, err := i.s.queriesFor(ctx, func(ctx context.Context, sql string, args ...any) scanner {
		return tx.QueryRowContext(ctx, sql, args...)
	})
	if err != nil {
		return err
	}
	sql, args, err := i.s.insertStatement(q, msgs)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, i.s.m.SQL(sql), args...)
	return insertError(len(msgs), err)
}

// insertArgs turns msgs into the insert statement's column arrays, or an
// error when the table of q cannot hold one of them.
func (s *Store) insertArgs(q *queries, msgs []*outbox.Message) ([]any, error) {
	n := len(msgs)
	var (
		ids, aggTypes, aggIDs, events = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		payloads, topics, keys        = make([]string, n), make([]string, n), make([]string, n)
		headers                       = make([]pgtype.Text, n)
		contentTypes, raws            = make([]string, n), make([][]byte, n) // raws: payloads that are not JSON
		deliverAts, expiresAts        = make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n)
	)
	for i, m := range msgs {
		if m == nil {
			return nil, fmt.Errorf("pgstore: insert: message %d is nil", i)
		}
		if err := sqlcore.CanHold(m, q.ContentType, q.PayloadBytes); err != nil {
			return nil, fmt.Errorf("pgstore: insert: message %d: %w", i, err)
		}
		if err := sqlcore.CanHoldTimes(m, q.DeliverAt, q.ExpiresAt); err != nil {
			return nil, fmt.Errorf("pgstore: insert: message %d: %w", i, err)
		}
		deliverAts[i] = pgtype.Timestamptz{Time: m.DeliverAt, Valid: !m.DeliverAt.IsZero()}
		expiresAts[i] = pgtype.Timestamptz{Time: m.ExpiresAt, Valid: !m.ExpiresAt.IsZero()}
		ids[i], aggTypes[i], aggIDs[i], events[i] = m.MessageID, m.AggregateType, m.AggregateID, m.EventType
		payloads[i], topics[i], keys[i], contentTypes[i] = string(m.Payload), m.Topic, m.PartitionKey, m.ContentType
		if !m.JSONPayload() {
			payloads[i], raws[i] = "null", m.Payload
		}
		if len(m.Headers) > 0 {
			b, err := json.Marshal(m.Headers)
			if err != nil {
				return nil, fmt.Errorf("pgstore: insert: message %d: encode headers: %w", i, err)
			}
			headers[i] = pgtype.Text{String: string(b), Valid: true}
		}
	}
	return []any{ids, aggTypes, aggIDs, events, payloads, headers, topics, keys, contentTypes, raws, deliverAts, expiresAts}, nil
}

// insertStatement returns the insert statement for msgs and its arguments:
// with a NOTIFY when this write is to send one.
func (s *Store) insertStatement(q *queries, msgs []*outbox.Message) (string, []any, error) {
	args, err := s.insertArgs(q, msgs)
	if err != nil {
		return "", nil, err
	}
	if ch := s.insertChannel(); ch != "" {
		return q.insertNotify, append(args, ch), nil
	}
	return q.insert, args, nil
}

// insertError translates the error of an insert statement.
func insertError(n int, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return fmt.Errorf("pgstore: insert %d messages: %w: %w", n, ErrDuplicate, err)
	}
	return fmt.Errorf("pgstore: insert %d messages: %w", n, err)
}

// DeleteTx deletes the rows of msgs, by message id, in the caller's
// transaction tx, for outbox.WithDeleteAfterInsert: inserted and deleted in
// one transaction, a message exists only in the log, for store/pgcdc.
func (s *Store) DeleteTx(ctx context.Context, tx pgx.Tx, msgs []*outbox.Message) error {
	_, err := tx.Exec(ctx, s.m.SQL("DELETE FROM "+s.ident+" WHERE message_id = ANY($1)"), messageIDs(msgs))
	if err != nil {
		return fmt.Errorf("pgstore: delete %d messages: %w", len(msgs), err)
	}
	return nil
}

// DeleteTx deletes the rows of msgs in tx, like [Store.DeleteTx].
func (i sqlInserter) DeleteTx(ctx context.Context, tx *sql.Tx, msgs []*outbox.Message) error {
	_, err := tx.ExecContext(ctx, i.s.m.SQL("DELETE FROM "+i.s.ident+" WHERE message_id = ANY($1)"), messageIDs(msgs))
	if err != nil {
		return fmt.Errorf("pgstore: delete %d messages: %w", len(msgs), err)
	}
	return nil
}

func messageIDs(msgs []*outbox.Message) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.MessageID
	}
	return ids
}
