// Package tablecheck holds what the stores' CheckTable methods share: the
// comparison of a table's columns with the contract and with the types the
// relay reads, each store giving its own type names.
package tablecheck

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outboxkit/outbox"
)

// Kind is a family of column types the relay reads correctly.
type Kind struct {
	Want string                // the type to suggest, e.g. "jsonb"
	OK   func(typ string) bool // whether a catalog type name belongs
	Why  string                // why other types do not do, when it is not obvious; optional
}

// Prefixes returns a Kind test that accepts a type named p or p followed by
// a size, a precision or modifiers ("varchar(64)", "bigint(20) unsigned").
func Prefixes(p ...string) func(string) bool {
	return func(typ string) bool {
		typ = strings.ToLower(typ)
		for _, p := range p {
			if typ == p || strings.HasPrefix(typ, p+"(") || strings.HasPrefix(typ, p+" ") {
				return true
			}
		}
		return false
	}
}

// Role is what the relay does with a column, which decides the types it reads there.
type Role int

// The roles of the columns.
const (
	RoleID      Role = iota + 1 // the row id: compared and ordered by the claim
	RoleKey                     // message_id, aggregate and event type: read as text
	RoleJSON                    // payload and headers
	RoleInteger                 // status and retry_count: compared with and set to integers
	RoleTime                    // next_retry_at (the lease), created_at, updated_at, deliver_at, expires_at
	RoleText                    // optional text columns: topic, partition_key, last_error, content_type
	RoleBytes                   // payload_bytes: read as the bytes it holds
)

// ColumnRoles are the roles of the columns the relay uses, contract and optional.
var ColumnRoles = map[string]Role{
	"id": RoleID, "message_id": RoleKey, "aggregate_type": RoleKey, "aggregate_id": RoleKey, "event_type": RoleKey,
	"payload": RoleJSON, "headers": RoleJSON, "status": RoleInteger, "retry_count": RoleInteger,
	"next_retry_at": RoleTime, "created_at": RoleTime, "updated_at": RoleTime,
	"topic": RoleText, "partition_key": RoleText, "last_error": RoleText,
	"content_type": RoleText, "payload_bytes": RoleBytes,
	"deliver_at": RoleTime, "expires_at": RoleTime,
}

// Params describe one table to compare.
type Params struct {
	Columns  map[string]string // the table's columns: name -> catalog type
	Contract []string          // the columns every table must have, in the contract's order
	Kinds    map[Role]Kind     // the types the relay reads, by role; nil: no type is checked
	// Alter returns the statement that gives column col, now of type typ, the type k.Want.
	Alter func(col, typ string, k Kind) string
}

// Problems returns every problem of the table: missing contract columns
// (all in one), then each column of a type the relay cannot read, by name.
func Problems(p Params) []outbox.TableProblem {
	var problems []outbox.TableProblem
	var missing []string
	for _, c := range p.Contract {
		if _, ok := p.Columns[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, outbox.TableProblem{
			Problem: "missing contract columns: " + strings.Join(missing, ", "),
			Fix:     "add them with the types docs/table-contract.md lists (`outbox migrate` adds only the optional columns to an existing table)",
		})
	}
	names := make([]string, 0, len(ColumnRoles))
	for c := range ColumnRoles {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		typ, ok := p.Columns[c]
		k, known := p.Kinds[ColumnRoles[c]]
		if !ok || !known || k.OK(typ) {
			continue
		}
		problem := fmt.Sprintf("column %s is %s, which the relay cannot read; want %s", c, typ, k.Want)
		if k.Why != "" {
			problem += " (" + k.Why + ")"
		}
		problems = append(problems, outbox.TableProblem{Problem: problem, Fix: p.Alter(c, typ, k)})
	}
	return problems
}

// CreateTable returns a CREATE TABLE statement for tests: the columns of
// base, their types replaced by those in types ("" drops a column).
func CreateTable(table string, base, types map[string]string) string {
	cols := maps.Clone(base)
	maps.Copy(cols, types)
	var defs []string
	for _, c := range slices.Sorted(maps.Keys(cols)) {
		if cols[c] != "" {
			defs = append(defs, c+" "+cols[c])
		}
	}
	return fmt.Sprintf("CREATE TABLE %s (%s)", table, strings.Join(defs, ", "))
}
