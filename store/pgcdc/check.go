package pgcdc

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/colmap"
)

var _ outbox.TableChecker = (*Source)(nil)

const codeUndefinedTable = "42P01"

// CheckTable checks that the table exists and, with WithColumns, has every
// column the mapping names; and that the dead table (WithDeadTable) exists
// with the contract's columns. It returns a *outbox.TableError naming every
// problem and its fix: a mapped column the table lacks is named with the
// mapping and the table's columns. It only reads the catalog. Without
// WithColumns it checks no column: a polling store's CheckTable on the same
// table checks the contract (the daemon runs it).
func (s *Source) CheckTable(ctx context.Context) error {
	var problems []outbox.TableProblem
	cols, err := s.table.readColumns(ctx)
	switch {
	case isCode(err, codeUndefinedTable):
		problems = append(problems, outbox.TableProblem{Problem: "table " + s.cfg.table + " not found",
			Fix: "correct the table name (table:) or the search_path"})
	case err != nil:
		return err
	case s.table.cols != nil:
		if err := s.table.cols.Check(s.cfg.table, cols); err != nil {
			problems = append(problems, outbox.TableProblem{Problem: err.Error(),
				Fix: "map each contract column to a column the table has (columns:, pgcdc.WithColumns)"})
		}
	}
	if s.dead != nil {
		problems = append(problems, s.checkDeadTable(ctx)...)
	}
	if len(problems) > 0 {
		return &outbox.TableError{Table: s.cfg.table, Problems: problems}
	}
	return nil
}

// checkDeadTable returns the problems of the dead table: missing, or
// without the contract's columns.
func (s *Source) checkDeadTable(ctx context.Context) []outbox.TableProblem {
	fix := "run `outbox migrate --table " + s.cfg.deadTable + "` to create it"
	cols, err := s.dead.readColumns(ctx)
	if isCode(err, codeUndefinedTable) {
		return []outbox.TableProblem{{Problem: "dead table " + s.cfg.deadTable + " not found", Fix: fix}}
	}
	if err != nil {
		return []outbox.TableProblem{{Problem: "read the columns of dead table " + s.cfg.deadTable + ": " + err.Error()}}
	}
	var missing []string
	for _, c := range slices.Concat(colmap.Required, colmap.State) {
		if !slices.Contains(cols, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return []outbox.TableProblem{{Problem: fmt.Sprintf("dead table %s lacks contract columns: %s",
			s.cfg.deadTable, strings.Join(missing, ", ")), Fix: fix}}
	}
	return nil
}
