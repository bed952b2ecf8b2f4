package sqlitestore

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/tablecheck"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

var _ outbox.TableChecker = (*Store)(nil)

// CheckTable checks that the table exists and has every contract column,
// and returns a *outbox.TableError naming every problem and its fix.
// SQLite's columns take any value whatever their declared type, so no type
// is refused: a value the relay cannot read makes its row malformed (dead
// with the reason), not the claim fail. It only reads the catalog. Safe for
// concurrent use.
func (s *Store) CheckTable(ctx context.Context) error {
	defs, err := declaredColumns(ctx, s.db, s.table)
	if err != nil {
		return fmt.Errorf("sqlitestore: check table: %w", err)
	}
	if defs, err = sqlcore.ContractDefs(s.mapping, s.table.raw, defs); err != nil {
		return fmt.Errorf("sqlitestore: check table: %w", err)
	}
	return sqlcore.CheckTable(s.table.raw, defs, func() (outbox.TableProblem, error) {
		return outbox.TableProblem{
			Problem: fmt.Sprintf("table %s not found in the database file", s.table.raw),
			Fix:     "run `outbox migrate` with this config, or correct the table name (table:) or the database path",
		}, nil
	}, tablecheck.Params{})
}
