package mysqlstore

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/tablecheck"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

var _ outbox.TableChecker = (*Store)(nil)

var (
	// integers: compared with and set to integers; text works only while
	// every row holds digits (one 'pending' fails every reschedule in strict
	// mode), so it is refused.
	integerKind = tablecheck.Kind{Want: "INT", OK: tablecheck.Prefixes("tinyint", "smallint", "mediumint", "int", "bigint")}
	// texts and bytes: the claim reads either as the string it holds.
	textKind = tablecheck.Kind{Want: "VARCHAR(255)", OK: tablecheck.Prefixes("char", "varchar", "tinytext", "text",
		"mediumtext", "longtext", "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "uuid")}
	// keys: strings, and integer keys, which read as written.
	keyKind = tablecheck.Kind{Want: "VARCHAR(64)", OK: func(typ string) bool { return textKind.OK(typ) || integerKind.OK(typ) }}
	// json: JSON (MariaDB's is LONGTEXT) or strings, which the relay checks.
	jsonKind = tablecheck.Kind{Want: "JSON", OK: func(typ string) bool { return typ == "json" || textKind.OK(typ) }}
	// bytes: payload_bytes, read as the bytes it holds; a text column's
	// character set would change them.
	bytesKind = tablecheck.Kind{Want: "LONGBLOB", OK: tablecheck.Prefixes("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")}
	// times: compared with UTC_TIMESTAMP(6) and set from it; a DATE drops
	// the lease's time of day, and text or numbers work only while every
	// writer uses the one format MySQL converts.
	timeKind = tablecheck.Kind{Want: "DATETIME(6)", OK: tablecheck.Prefixes("datetime", "timestamp")}
)

// columnKinds are the types the relay reads in each role of column, found
// by running a relay on hand-made tables (check_test.go).
var columnKinds = map[tablecheck.Role]tablecheck.Kind{
	tablecheck.RoleID: integerKind, tablecheck.RoleKey: keyKind, tablecheck.RoleJSON: jsonKind,
	tablecheck.RoleInteger: integerKind, tablecheck.RoleTime: timeKind, tablecheck.RoleText: textKind,
	tablecheck.RoleBytes: bytesKind,
}

// CheckTable checks that the table exists, has every contract column, and
// that each column the relay uses has a type the relay reads (see
// docs/table-contract.md). It returns a *outbox.TableError naming every
// problem and its fix. It only reads information_schema. Safe for
// concurrent use.
func (s *Store) CheckTable(ctx context.Context) error {
	defs, err := columnDefs(ctx, s.db, s.table)
	if err != nil {
		return fmt.Errorf("mysqlstore: check table: %w", err)
	}
	if defs, err = sqlcore.ContractDefs(s.mapping, s.table.raw, defs); err != nil {
		return fmt.Errorf("mysqlstore: check table: %w", err)
	}
	return sqlcore.CheckTable(s.table.raw, defs, func() (outbox.TableProblem, error) {
		var db *string
		if err := s.db.QueryRowContext(ctx, databaseSQL, s.table.schemaArg()).Scan(&db); err != nil {
			return outbox.TableProblem{}, fmt.Errorf("mysqlstore: check table: %w", err)
		}
		where := "no database selected"
		if db != nil {
			where = "database " + *db
		}
		return outbox.TableProblem{
			Problem: fmt.Sprintf("table %s not found (%s)", s.table.name, where),
			Fix:     "run `outbox migrate` with this config, or correct the table name (table:) or the database in the DSN",
		}, nil
	}, tablecheck.Params{Kinds: columnKinds, Alter: func(c, _ string, k tablecheck.Kind) string {
		return fmt.Sprintf("ALTER TABLE %s MODIFY %s %s (keep its NULL/NOT NULL and default)", s.table.quoted(), quoteIdent(s.column(c)), k.Want)
	}})
}
