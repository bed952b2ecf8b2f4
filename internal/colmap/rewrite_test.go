package colmap_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/colmap"
)

func TestRewriter(t *testing.T) {
	t.Parallel()
	m := colmap.Map{"id": "ob_id", "status": "ob_status", "payload": "payload"}
	for _, tc := range []struct {
		name string
		d    colmap.Dialect
		in   string
		want string
	}{
		{"mysql columns", colmap.MySQL, "SELECT o.id FROM t AS o WHERE status = ?", "SELECT o.`ob_id` FROM t AS o WHERE `ob_status` = ?"},
		{"sqlite columns", colmap.SQLite, "SELECT o.id FROM t AS o WHERE status = ?", `SELECT o."ob_id" FROM t AS o WHERE "ob_status" = ?`},
		{"postgres columns", colmap.PostgreSQL, "WHERE id > $1 AND status$x", `WHERE "ob_id" > $1 AND status$x`},
		{"words containing a column", colmap.MySQL, "a(id, attempt) id2 _id ids status_x", "a(`ob_id`, attempt) id2 _id ids status_x"},
		{"mysql literals", colmap.MySQL, `'id' "id" 'it''s id' 'a\'id' "b\"id" id`, "'id' \"id\" 'it''s id' 'a\\'id' \"b\\\"id\" `ob_id`"},
		{"mysql backslash at the end", colmap.MySQL, `'a\\' id`, `'a\\' ` + "`ob_id`"},
		{"mysql quoted identifiers", colmap.MySQL, "`id` `a``id` id", "`id` `a``id` `ob_id`"},
		{"sqlite quoted identifiers", colmap.SQLite, `"id" "a""id" ` + "`id` [id] 'id' id", `"id" "a""id" ` + "`id` [id] 'id' \"ob_id\""},
		{"sqlite no backslash escapes", colmap.SQLite, `'a\' id`, `'a\' "ob_id"`},
		{"line comments", colmap.MySQL, "payload -- id\nid # status\nstatus", "`payload` -- id\n`ob_id` # status\n`ob_status`"},
		{"hash is no comment in sqlite", colmap.SQLite, "id # status", `"ob_id" # "ob_status"`},
		{"block comment", colmap.SQLite, "/* id */ id /* status", `/* id */ "ob_id" /* status`},
		{"parameters and variables", colmap.MySQL, "? @id ?id 1id", "? @id ?`ob_id` 1id"},
		{"unterminated literal", colmap.MySQL, "id 'unterminated id", "`ob_id` 'unterminated id"},
		{"case sensitive", colmap.MySQL, "ID Status", "ID Status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := colmap.NewRewriter(m, tc.d)
			require.Equal(t, tc.want, r.SQL(tc.in))
			require.Equal(t, tc.want, r.SQL(tc.in), "cached")
			require.Equal(t, tc.want, r.SQL(r.SQL(tc.in)), "twice")
		})
	}
	swap := colmap.NewRewriter(colmap.Map{"id": "message_id", "message_id": "id"}, colmap.MySQL)
	require.Equal(t, "SELECT `message_id`, `id` FROM t WHERE `message_id` > ?", swap.SQL("SELECT id, message_id FROM t WHERE id > ?"))
	require.Equal(t, "SELECT `a``b`", colmap.NewRewriter(colmap.Map{"id": "a`b"}, colmap.MySQL).SQL("SELECT id"))
	require.Nil(t, colmap.NewRewriter(nil, colmap.MySQL))
	var none *colmap.Rewriter
	require.Equal(t, "SELECT id", none.SQL("SELECT id"))
}
