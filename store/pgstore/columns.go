package pgstore

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/colmap"
)

// WithColumns makes the Store poll a table whose columns have other names:
// cols maps each contract column (docs/table-contract.md: id, message_id,
// aggregate_type, aggregate_id, event_type, payload, status, retry_count,
// next_retry_at, created_at, updated_at, and the optional ones) to the
// table's column that holds it, as store/pgcdc's WithColumns does. Polling
// settles rows in the table, so the mapping must name every state column
// (id, status, retry_count, next_retry_at, created_at, updated_at); a
// log-only mapping, which names none, is refused by [New] (read such a
// table with store/pgcdc). An optional column the mapping does not name is
// treated as absent, whatever the table has. [Store.CheckTable] and the
// first statement report mapped columns the table lacks, with the mapping
// and the table's columns.
//
// A mapped table is the team's own: [Store.Migrate] refuses it, and
// [WithBatchLease] and [WithNotifyTrigger] are refused with it (not
// available yet). [Store.Archive] moves every column of the
// table, mapped or not. The claims know their indexes by the names Migrate
// gives them, which [Store.MissingIndexes] advises with the table's
// columns. Default: none (the contract's names).
func WithColumns(cols map[string]string) Option {
	return func(c *config) { c.columns = colmap.Map(maps.Clone(cols)) }
}

// checkColumns returns the problems of WithColumns and of the options a
// mapped table refuses.
func (c *config) checkColumns() []error {
	if len(c.columns) == 0 {
		return nil
	}
	var errs []error
	if err := c.columns.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("WithColumns: %w", err))
	}
	if c.columns.LogOnly() {
		errs = append(errs, fmt.Errorf("WithColumns: a log-only mapping (no state columns: %s) cannot be polled; "+
			"read the table with store/pgcdc", strings.Join(colmap.State, ", ")))
	}
	for _, o := range []struct {
		on   bool
		name string
	}{{c.batchLease, "WithBatchLease"}, {c.notifyTrigger, "WithNotifyTrigger"}} {
		if o.on {
			errs = append(errs, fmt.Errorf("%s: not available with WithColumns yet", o.name))
		}
	}
	return errs
}

// errMapped is returned by the methods a mapped table does not support.
var errMapped = errors.New("not available on a table mapped by WithColumns")

// mapper rewrites the Store's statements, written with the contract's
// column names, for a table mapped by WithColumns: every unquoted
// identifier outside string literals that is a contract column becomes the
// quoted name of the table's column. The statements never use a contract
// column's name for anything else (aliases of the table's rows, a VALUES or
// unnest list feeding the table's columns), so renaming them all keeps each
// statement whole. Rewritten statements are quoted identifiers throughout,
// so rewriting twice changes nothing. A nil mapper leaves statements as
// they are.
type mapper struct {
	to   map[string]string // contract column -> quoted table column
	done sync.Map          // statement -> rewritten
}

func newMapper(cols colmap.Map) *mapper {
	if len(cols) == 0 {
		return nil
	}
	m := &mapper{to: make(map[string]string, len(cols))}
	for k, v := range cols {
		m.to[k] = pgx.Identifier{v}.Sanitize()
	}
	return m
}

// sql returns stmt for the table: rewritten with a mapping, as it is without.
func (m *mapper) sql(stmt string) string {
	if m == nil {
		return stmt
	}
	if v, ok := m.done.Load(stmt); ok {
		return v.(string)
	}
	out := m.rewrite(stmt)
	m.done.Store(stmt, out)
	return out
}

// rewrite renames the contract columns of stmt (see mapper).
func (m *mapper) rewrite(stmt string) string {
	var b strings.Builder
	b.Grow(len(stmt) + len(stmt)/8)
	for i := 0; i < len(stmt); {
		c := stmt[i]
		switch {
		case c == '\'' || c == '"': // a literal or a quoted identifier, '' and "" escaped
			j := i + 1
			for j < len(stmt) {
				if stmt[j] == c {
					if j+1 < len(stmt) && stmt[j+1] == c {
						j += 2
						continue
					}
					break
				}
				j++
			}
			j = min(j+1, len(stmt))
			b.WriteString(stmt[i:j])
			i = j
		case c == '-' && i+1 < len(stmt) && stmt[i+1] == '-': // a comment to the end of the line
			j := strings.IndexByte(stmt[i:], '\n')
			if j < 0 {
				j = len(stmt) - i
			}
			b.WriteString(stmt[i : i+j])
			i += j
		case isIdentStart(c) || c == '$' || (c >= '0' && c <= '9'):
			// A word: an identifier, a keyword, a parameter ($1,
			// $max_payload) or a number; only a bare identifier is renamed.
			j := i + 1
			for j < len(stmt) && isIdentPart(stmt[j]) {
				j++
			}
			word := stmt[i:j]
			if to, ok := m.to[word]; ok && isIdentStart(c) {
				b.WriteString(to)
			} else {
				b.WriteString(word)
			}
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

func isIdentStart(c byte) bool { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

func isIdentPart(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') || c == '$' }

// contractColumns turns the table's columns (name -> type) into the
// contract's names for the mapped table: the columns the mapping names,
// under their contract names. It fails, with the mapping and the table's
// columns, when the table lacks a mapped column.
func (s *Store) contractColumns(cols map[string]string) (map[string]string, error) {
	if len(s.cfg.columns) == 0 {
		return cols, nil
	}
	names := make([]string, 0, len(cols))
	for n := range cols {
		names = append(names, n)
	}
	if err := s.cfg.columns.Check(s.cfg.table, names); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	out := make(map[string]string, len(s.cfg.columns))
	for k, v := range s.cfg.columns {
		out[k] = cols[v]
	}
	return out, nil
}
