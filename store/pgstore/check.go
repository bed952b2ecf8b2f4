package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/tablecheck"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

var _ outbox.TableChecker = (*Store)(nil)

var (
	// integers: compared with integer parameters, scanned into Go integers.
	integerKind = tablecheck.Kind{Want: "integer", OK: tablecheck.Prefixes("smallint", "integer", "bigint")}
	// ids: the claim cursor compares them with 64-bit bounds, which an
	// integer (serial) column refuses.
	idKind = tablecheck.Kind{Want: "bigint", OK: tablecheck.Prefixes("bigint"),
		Why: "the claim compares ids with 64-bit bounds"}
	// texts: read with ::text; bytea is not, since ::text gives its hex form.
	textKind = tablecheck.Kind{Want: "text", OK: tablecheck.Prefixes("text", "character varying", "character", "citext", "name")}
	// keys: texts, and uuid or integer keys, which ::text prints as written.
	keyKind = tablecheck.Kind{Want: "text", OK: func(typ string) bool {
		return textKind.OK(typ) || typ == "uuid" || integerKind.OK(typ)
	}}
	// json: what jsonCast accepts (the insert casts to it, the claim reads ::text).
	jsonKind = tablecheck.Kind{Want: "jsonb", OK: func(typ string) bool {
		_, err := jsonCast("", typ)
		return err == nil
	}}
	// bytes: payload_bytes is read as bytea; text would be re-encoded.
	bytesKind = tablecheck.Kind{Want: "bytea", OK: tablecheck.Prefixes("bytea")}
	// times: compared with now(); without a time zone they follow the session's.
	timeKind = tablecheck.Kind{Want: "timestamptz", OK: tablecheck.Prefixes("timestamp")}
)

// columnKinds are the types the relay reads in each role of column, found
// by running a relay on hand-made tables (check_test.go).
var columnKinds = map[tablecheck.Role]tablecheck.Kind{
	tablecheck.RoleID: idKind, tablecheck.RoleKey: keyKind, tablecheck.RoleJSON: jsonKind,
	tablecheck.RoleInteger: integerKind, tablecheck.RoleTime: timeKind, tablecheck.RoleText: textKind,
	tablecheck.RoleBytes: bytesKind,
}

// CheckTable checks that the table exists, has every contract column, and
// that each column the relay uses has a type the relay reads (see
// docs/table-contract.md); then it prepares, without running them, the
// statements the relay will run, which catches what the type rules do not.
// It returns a *outbox.TableError naming every problem and its fix. It only
// reads the catalog. Safe for concurrent use.
func (s *Store) CheckTable(ctx context.Context) error {
	cols, err := s.columns(ctx, s.poolRow)
	if errors.Is(err, errNoTable) {
		var path string
		if err := s.pool.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&path); err != nil {
			return fmt.Errorf("pgstore: check table %s: %w", s.cfg.table, err)
		}
		where := "in the schemas of search_path (" + path + ")"
		if schema, _, ok := strings.Cut(s.cfg.table, "."); ok {
			where = "in schema " + schema
		}
		return &outbox.TableError{Table: s.cfg.table, Problems: []outbox.TableProblem{{
			Problem: fmt.Sprintf("table %s not found %s", s.cfg.table, where),
			Fix:     "run `outbox migrate` with this config, or correct the table name (table:) or the search_path",
		}}}
	}
	if err != nil {
		return err
	}
	problems := tablecheck.Problems(tablecheck.Params{Columns: cols, Contract: sqlcore.ContractColumns, Kinds: columnKinds,
		Alter: func(c, typ string, k tablecheck.Kind) string {
			if v, ok := s.cfg.columns[c]; ok { // the table's name of the column, with WithColumns
				c = pgx.Identifier{v}.Sanitize()
			}
			using := c + "::" + k.Want
			if k.Want == "bytea" {
				using = fmt.Sprintf("convert_to(%s::text, 'UTF8')", c)
			}
			if typ == "bytea" {
				using = fmt.Sprintf("convert_from(%s, 'UTF8')::%s", c, k.Want)
			}
			return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s USING %s", s.ident, c, k.Want, using)
		}})
	if len(problems) == 0 {
		problems = s.prepareRelayStatements(ctx, cols)
	}
	if len(problems) > 0 {
		return &outbox.TableError{Table: s.cfg.table, Problems: problems}
	}
	return nil
}

// prepareRelayStatements prepares the statements the relay runs on the
// table (claim, ack, reschedule, kill, stats) without running them, and
// returns a problem for each that the database refuses.
func (s *Store) prepareRelayStatements(ctx context.Context, cols map[string]string) []outbox.TableProblem {
	var encoding string
	if err := s.pool.QueryRow(ctx, "SELECT current_setting('server_encoding')").Scan(&encoding); err != nil {
		return []outbox.TableProblem{{Problem: "read server_encoding: " + err.Error()}}
	}
	q, err := buildQueries(s.ident, cols, buildOptions{asyncCommit: s.cfg.asyncCommit, leaseTable: s.leaseTable(),
		heldClaims: s.cfg.heldClaims, utf8: encoding == "UTF8"})
	if err != nil {
		return []outbox.TableProblem{{Problem: err.Error()}}
	}
	stmts := []struct{ name, sql string }{
		{"claim", q.claim[claimUnordered]}, {"claim without the pending index", q.claimStatus}, {"ordered claim", q.claim[claimOrdered]},
		{"ordered claim (dead rows block)", q.claim[claimOrderedBlockOnDead]},
		{"ack", q.ack}, {"delete", q.del}, {"reschedule", q.reschedule}, {"kill", q.kill}, {"stats", q.stats},
	}
	for i, oq := range buildOrderedQueries(s.ident, q, s.asyncFilter()) {
		stmts = append(stmts, struct{ name, sql string }{fmt.Sprintf("ordered claim without the head index (%d)", i), oq.byStatus},
			struct{ name, sql string }{fmt.Sprintf("ordered claim of the whole backlog without the head index (%d)", i), oq.byStatusAll})
	}
	// Runs claims read the aggregates' rows through the head index, or
	// through the contract's (aggregate_type, aggregate_id) index without it.
	for i, rq := range buildRunsQueries(s.ident, q, false, s.asyncFilter()) {
		stmts = append(stmts, struct{ name, sql string }{fmt.Sprintf("runs claim (%d)", i), rq.fromCursor},
			struct{ name, sql string }{fmt.Sprintf("runs claim without the pending index (%d)", i), rq.byStatus})
	}
	if q.lease != nil {
		stmts = append(stmts, struct{ name, sql string }{"batch-lease claim", q.lease.claim[claimUnordered]})
	}
	if q.held != nil {
		stmts = append(stmts, struct{ name, sql string }{"held claim", q.held.claim},
			struct{ name, sql string }{"held claim without the pending index", q.held.claimStatus})
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return []outbox.TableProblem{{Problem: "prepare the relay's statements: " + err.Error()}}
	}
	defer conn.Release()
	// Statements that fail for one reason make one problem.
	var reasons []string
	failing := map[string][]string{}
	for _, st := range stmts {
		if _, err := conn.Conn().PgConn().Prepare(ctx, "", s.m.SQL(st.sql), nil); err != nil {
			why := err.Error()
			if failing[why] == nil {
				reasons = append(reasons, why)
			}
			failing[why] = append(failing[why], st.name)
		}
	}
	var problems []outbox.TableProblem
	for _, why := range reasons {
		problems = append(problems, outbox.TableProblem{
			Problem: fmt.Sprintf("the relay's statements fail on this table (%s): %s", strings.Join(failing[why], ", "), why),
			Fix: "run `outbox migrate` with this config (it creates what its options need, such as the batch-lease table), " +
				"or give the columns the types docs/table-contract.md lists",
		})
	}
	return problems
}
