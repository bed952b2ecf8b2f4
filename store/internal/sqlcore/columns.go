package sqlcore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/internal/colmap"
)

// CheckColumns returns the problems of a store's WithColumns mapping m (none
// when m is empty): those of colmap's Validate, and a log-only mapping,
// which a polling store cannot settle rows with (fix says what to do
// instead).
func CheckColumns(m colmap.Map, fix string) []error {
	if len(m) == 0 {
		return nil
	}
	var errs []error
	if err := m.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("WithColumns: %w", err))
	}
	if m.LogOnly() {
		errs = append(errs, fmt.Errorf("WithColumns: a log-only mapping (no state columns: %s) cannot be polled; %s",
			strings.Join(colmap.State, ", "), fix))
	}
	return errs
}

// ContractDefs returns the columns of table (defs, as the catalog has them)
// under the contract's names for mapping m: each column m names, renamed to
// its contract column, and no other. It fails, with the mapping and the
// table's columns, when the table lacks a column m names. With an empty m,
// and for a table that does not exist (no defs), it returns defs.
func ContractDefs(m colmap.Map, table string, defs []ColumnDef) ([]ColumnDef, error) {
	if len(m) == 0 || len(defs) == 0 {
		return defs, nil
	}
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = strings.ToLower(d.Name)
	}
	if err := m.Check(table, names); err != nil {
		return nil, err
	}
	rev := m.Reverse()
	var out []ColumnDef
	for i, d := range defs {
		if c, ok := rev[names[i]]; ok {
			out = append(out, ColumnDef{Name: c, Type: d.Type})
		}
	}
	return out, nil
}

// ContractName returns the contract column that the table's column col
// holds under mapping m; a column m does not name returns "" (it is no
// contract column). With an empty m it returns col.
func ContractName(m colmap.Map, col string) string {
	if len(m) == 0 {
		return col
	}
	for k, v := range m {
		if v == col {
			return k
		}
	}
	return ""
}

// ErrMapped is returned by the methods a table mapped by a store's
// WithColumns does not support (Migrate).
var ErrMapped = errors.New("not available on a table mapped by WithColumns")

// Column returns the table's name of contract column c under mapping m: c
// itself where m does not name it.
func Column(m colmap.Map, c string) string {
	if v, ok := m.Column(c); ok {
		return v
	}
	return c
}
