package inbox

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// Dialect names the SQL database behind an [Inbox] or a [StateGuard].
type Dialect string

// The supported dialects.
const (
	// Postgres is PostgreSQL 12+, through any database/sql driver that returns
	// *pgconn.PgError (pgx's stdlib: stdlib.OpenDBFromPool(pool)).
	Postgres Dialect = "postgres"
	// MySQL is MySQL 8 or MariaDB 10.6+, through github.com/go-sql-driver/mysql.
	MySQL Dialect = "mysql"
	// SQLite is SQLite 3.35+, through modernc.org/sqlite (or any driver whose
	// errors have a Code() int method). Open it with a busy timeout, as
	// concurrent writers otherwise fail at once with SQLITE_BUSY.
	SQLite Dialect = "sqlite"
)

func (d Dialect) valid() bool { return d == Postgres || d == MySQL || d == SQLite }

// ph returns the n-th (1-based) bind placeholder.
func (d Dialect) ph(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// phs returns count placeholders starting at the from-th, comma separated.
func (d Dialect) phs(from, count int) string {
	ps := make([]string, count)
	for i := range ps {
		ps[i] = d.ph(from + i)
	}
	return strings.Join(ps, ", ")
}

// timeValue is how a timestamp is bound: SQLite stores Unix microseconds,
// the others a timestamp column. Every timestamp is UTC.
func (d Dialect) timeValue(t time.Time) any {
	if d == SQLite {
		return t.UnixMicro()
	}
	return t.UTC()
}

// identPart is one unquoted identifier: a letter or underscore, then letters,
// digits and underscores. Nothing that needs escaping can pass.
var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxIdent leaves room for the suffixes (_seq, _processed_idx) under the
// 63-byte limit of PostgreSQL and 64 of MySQL.
const maxIdent = 48

// ident is a validated, optionally schema-qualified, table or column name.
type ident struct{ schema, name string }

func parseIdent(s string, qualified bool) (ident, error) {
	parts := strings.Split(s, ".")
	if len(parts) > 2 || (!qualified && len(parts) > 1) {
		return ident{}, fmt.Errorf("%q has too many dots", s)
	}
	for _, p := range parts {
		if !identPart.MatchString(p) || len(p) > maxIdent {
			return ident{}, fmt.Errorf("%q is not a plain identifier (letters, digits, _; at most %d bytes each part)", s, maxIdent)
		}
	}
	if len(parts) == 2 {
		return ident{schema: parts[0], name: parts[1]}, nil
	}
	return ident{name: parts[0]}, nil
}

// with returns the identifier with its name suffixed, in the same schema.
func (id ident) with(suffix string) ident { return ident{schema: id.schema, name: id.name + suffix} }

func (d Dialect) quoteName(s string) string {
	if d == MySQL {
		return "`" + s + "`"
	}
	return `"` + s + `"`
}

// quote returns the identifier quoted for d (already validated, so quoting
// only protects reserved words and case).
func (d Dialect) quote(id ident) string {
	if id.schema != "" {
		return d.quoteName(id.schema) + "." + d.quoteName(id.name)
	}
	return d.quoteName(id.name)
}

// errKind classifies a driver error.
type errKind int

const (
	errOther     errKind = iota
	errUnique            // unique or primary key violation
	errTransient         // deadlock, serialization failure, lock timeout, database busy: retrying can succeed
)

// classify translates driver errors at the boundary.
func (d Dialect) classify(err error) errKind {
	if err == nil {
		return errOther
	}
	switch d {
	case Postgres:
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			switch pe.Code {
			case "23505":
				return errUnique
			case "40001", "40P01", "55P03":
				return errTransient
			}
		}
	case MySQL:
		var me *mysql.MySQLError
		if errors.As(err, &me) {
			switch me.Number {
			case 1062:
				return errUnique
			case 1205, 1213:
				return errTransient
			}
		}
	case SQLite:
		var ce interface{ Code() int }
		if errors.As(err, &ce) {
			switch ce.Code() & 0xff { // primary result code
			case 19: // SQLITE_CONSTRAINT
				if ce.Code() == 1555 || ce.Code() == 2067 { // SQLITE_CONSTRAINT_PRIMARYKEY, _UNIQUE
					return errUnique
				}
			case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
				return errTransient
			}
		}
	}
	return errOther
}
