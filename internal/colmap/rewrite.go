package colmap

import (
	"strings"
	"sync"
	"sync/atomic"
)

// Dialect is what a Rewriter needs to know of a database's SQL: how it
// quotes identifiers and writes string literals and comments.
type Dialect struct {
	// Quote quotes the table's columns in rewritten statements: '"' or '`'.
	// A doubled Quote inside stands for one.
	Quote byte
	// Literals are the characters that open a string literal, ended by the
	// same character; a doubled one inside stands for one.
	Literals string
	// Idents are the characters that open a quoted identifier, ended by the
	// same character; a doubled one inside stands for one.
	Idents string
	// BackslashEscapes says that a backslash in a string literal escapes
	// the character after it (MySQL's default sql_mode).
	BackslashEscapes bool
	// HashComments says that # starts a comment to the end of the line.
	HashComments bool
}

// The dialects of the stores' databases.
var (
	// PostgreSQL: 'literals', "identifiers", $1 parameters.
	PostgreSQL = Dialect{Quote: '"', Literals: "'", Idents: `"`}
	// MySQL and MariaDB without ANSI_QUOTES: 'literals' and "literals" with
	// backslash escapes, `identifiers`, # comments.
	MySQL = Dialect{Quote: '`', Literals: `'"`, Idents: "`", BackslashEscapes: true, HashComments: true}
	// SQLite: 'literals', and "identifiers" as well as `identifiers` and [identifiers].
	SQLite = Dialect{Quote: '"', Literals: "'", Idents: "\"`["}
)

// Rewriter rewrites statements written with the contract's column names
// for a table whose columns have other names (a Map): every bare identifier
// outside literals, quoted identifiers and comments that is a contract
// column the Map names becomes the quoted name of the table's column; any
// other text is kept byte for byte. A statement that names a contract
// column for anything else (an alias, a derived table's column) has it
// renamed too, consistently, which keeps the statement whole. Rewritten
// statements name the table's columns quoted, so rewriting twice changes
// nothing. A nil Rewriter (no mapping) returns statements as they are.
//
// A Rewriter caches what it rewrote (up to maxCached statements: those
// built per batch size may be many); it is safe for concurrent use.
type Rewriter struct {
	d      Dialect
	to     map[string]string // contract column -> quoted table column
	done   sync.Map          // statement -> rewritten
	cached atomic.Int64      // entries in done
}

// maxCached is how many rewritten statements a Rewriter keeps.
const maxCached = 4096

// NewRewriter returns the Rewriter of m in dialect d, or nil when m is empty.
func NewRewriter(m Map, d Dialect) *Rewriter {
	if len(m) == 0 {
		return nil
	}
	r := &Rewriter{d: d, to: make(map[string]string, len(m))}
	q := string(d.Quote)
	for k, v := range m {
		r.to[k] = q + strings.ReplaceAll(v, q, q+q) + q
	}
	return r
}

// SQL returns stmt for the mapped table: rewritten by r, or as it is when r
// is nil.
func (r *Rewriter) SQL(stmt string) string {
	if r == nil {
		return stmt
	}
	if v, ok := r.done.Load(stmt); ok {
		return v.(string)
	}
	out := r.rewrite(stmt)
	if r.cached.Add(1) <= maxCached {
		r.done.Store(stmt, out)
	}
	return out
}

func (r *Rewriter) rewrite(stmt string) string {
	var b strings.Builder
	b.Grow(len(stmt) + len(stmt)/8)
	n := len(stmt)
	for i := 0; i < n; {
		c := stmt[i]
		switch {
		case strings.IndexByte(r.d.Literals, c) >= 0 || strings.IndexByte(r.d.Idents, c) >= 0:
			end := c
			if c == '[' {
				end = ']'
			}
			escapes := r.d.BackslashEscapes && strings.IndexByte(r.d.Literals, c) >= 0
			j := i + 1
			for j < n {
				if escapes && stmt[j] == '\\' {
					j += 2
					continue
				}
				if stmt[j] == end {
					if end != ']' && j+1 < n && stmt[j+1] == end {
						j += 2
						continue
					}
					break
				}
				j++
			}
			j = min(j+1, n)
			b.WriteString(stmt[i:j])
			i = j
		case (c == '-' && i+1 < n && stmt[i+1] == '-') || (c == '#' && r.d.HashComments):
			j := strings.IndexByte(stmt[i:], '\n')
			if j < 0 {
				j = n - i
			}
			b.WriteString(stmt[i : i+j])
			i += j
		case c == '/' && i+1 < n && stmt[i+1] == '*':
			j := strings.Index(stmt[i+2:], "*/")
			if j < 0 {
				j = n
			} else {
				j += i + 4
			}
			b.WriteString(stmt[i:j])
			i = j
		case isIdentStart(c) || c == '$' || c == '@' || (c >= '0' && c <= '9'):
			// A word: an identifier, a keyword, a parameter ($1, @v) or a
			// number; only a bare identifier is renamed.
			j := i + 1
			for j < n && isIdentPart(stmt[j]) {
				j++
			}
			word := stmt[i:j]
			if to, ok := r.to[word]; ok && isIdentStart(c) {
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
