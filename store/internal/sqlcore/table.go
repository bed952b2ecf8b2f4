package sqlcore

import (
	"context"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/tablecheck"
)

// ParseTable checks a table name, "name" or "schema.name", each part a
// letter or underscore followed by up to d.MaxIdent - 1 letters, digits or
// underscores, so that no SQL can ride in on it, and returns its parts
// (schema "" when unqualified).
func (d *Dialect) ParseTable(raw string) (schema, name string, err error) {
	parts := strings.Split(raw, ".")
	if len(parts) > 2 {
		return "", "", fmt.Errorf("table name %q has more than one dot", raw)
	}
	ident := regexp.MustCompile(fmt.Sprintf(`^[A-Za-z_][A-Za-z0-9_]{0,%d}$`, d.MaxIdent-1))
	for _, p := range parts {
		if !ident.MatchString(p) {
			return "", "", fmt.Errorf("table name %q: %q is not a letter or underscore followed by up to %d letters, digits or underscores",
				raw, p, d.MaxIdent-1)
		}
	}
	if len(parts) == 2 {
		schema = parts[0]
	}
	return schema, parts[len(parts)-1], nil
}

// ArchiveName is the name of a table's archive: its name with "_archive"
// appended, shortened with a hash of the name where it would be longer than
// max (0: no limit).
func ArchiveName(name string, max int) string { return SideName(name, "_archive", max) }

// SideName is the name of a table that goes with table name: name with
// suffix appended, shortened with a hash of the name where it would be
// longer than max (0: no limit).
func SideName(name, suffix string, max int) string {
	side := name + suffix
	if max == 0 || len(side) <= max {
		return side
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	tag := fmt.Sprintf("_%08x%s", h.Sum32(), suffix)
	return name[:max-len(tag)] + tag
}

// Columns records which optional columns a table has.
type Columns struct {
	Headers, Topic, PartitionKey, LastError bool
	// ContentType and PayloadBytes are the columns of messages that are not
	// plain application/json (docs/table-contract.md).
	ContentType, PayloadBytes bool
	// DeliverAt and ExpiresAt are the columns of delayed and expiring
	// messages (docs/table-contract.md).
	DeliverAt, ExpiresAt bool
}

// ReadColumns checks the lower-cased column names of table (as given, for
// errors) and returns its optional ones. A table with no columns does not
// exist: the error wraps noTable.
func ReadColumns(names map[string]bool, table string, noTable error) (Columns, error) {
	if len(names) == 0 {
		return Columns{}, fmt.Errorf("%w: %s", noTable, table)
	}
	var missing []string
	for _, c := range ContractColumns {
		if !names[c] {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return Columns{}, fmt.Errorf("table %s lacks contract columns: %s", table, strings.Join(missing, ", "))
	}
	return Columns{
		Headers:      names["headers"],
		Topic:        names["topic"],
		PartitionKey: names["partition_key"],
		LastError:    names["last_error"],
		ContentType:  names[ColContentType],
		PayloadBytes: names[ColPayloadBytes],
		DeliverAt:    names[ColDeliverAt],
		ExpiresAt:    names[ColExpiresAt],
	}, nil
}

// ColumnDef is a column's lower-cased name and its type as the catalog gives it.
type ColumnDef struct{ Name, Type string }

// ColumnDefs runs query, which selects (name, type) of table's columns in
// order, through q; table (as given) is for errors.
func ColumnDefs(ctx context.Context, q Queryer, table, query string, args ...any) ([]ColumnDef, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", table, err)
	}
	defer rows.Close()
	var out []ColumnDef
	for rows.Next() {
		var c ColumnDef
		if err := rows.Scan(&c.Name, &c.Type); err != nil {
			return nil, fmt.Errorf("read columns of %s: %w", table, err)
		}
		c.Name = strings.ToLower(c.Name)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", table, err)
	}
	return out, nil
}

// Strings runs query, which selects one text column, through q and returns
// its values; what names what it reads, for errors ("indexes of t").
func Strings(ctx context.Context, q Queryer, what, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("read %s: %w", what, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return out, nil
}

// CheckTable is a store's outbox.TableChecker check of table (as given),
// whose columns are defs: with none, the table was not found, and
// notFound says where it was looked for; otherwise p (with its Columns and
// Contract filled in from defs) lists the problems. It returns a
// *outbox.TableError naming them, or nil for none.
func CheckTable(table string, defs []ColumnDef, notFound func() (outbox.TableProblem, error), p tablecheck.Params) error {
	var problems []outbox.TableProblem
	if len(defs) == 0 {
		problem, err := notFound()
		if err != nil {
			return err
		}
		problems = append(problems, problem)
	} else {
		p.Columns, p.Contract = make(map[string]string, len(defs)), ContractColumns
		for _, d := range defs {
			p.Columns[d.Name] = strings.ToLower(d.Type)
		}
		problems = tablecheck.Problems(p)
	}
	if len(problems) == 0 {
		return nil
	}
	return &outbox.TableError{Table: table, Problems: problems}
}

// Names is the set of the columns' names.
func Names(defs []ColumnDef) map[string]bool {
	names := make(map[string]bool, len(defs))
	for _, c := range defs {
		names[c.Name] = true
	}
	return names
}

// ArchiveColumns compares a table's columns, live, with its archive's,
// have, and returns the columns the archive lacks and the quoted list of
// live's columns, which both have once those are added.
func (d *Dialect) ArchiveColumns(live, have []ColumnDef) (missing []ColumnDef, list string) {
	known := Names(have)
	names := make([]string, len(live))
	for i, c := range live {
		names[i] = d.Ident(c.Name)
		if !known[c.Name] {
			missing = append(missing, c)
		}
	}
	return missing, strings.Join(names, ", ")
}
