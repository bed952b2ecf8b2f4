package sqlitestore

import (
	"database/sql"
	"flag"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
	"github.com/outboxkit/outbox/store/internal/sqltest"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden")

// stmts shows sqltest every statement the Store builds (its own and
// sqlcore's), for each shape of table they depend on.
var stmts = sqltest.Statements[*Store]{
	Shapes: []sqltest.Shape[*Store]{{Name: "Migrated", Open: orderedStore}, {Name: "ContractOnly", Open: contractStore}},
	Of: func(t *testing.T, s *Store, db *sql.DB) (core, own map[string]string) {
		cols, err := s.columns(t.Context(), db)
		require.NoError(t, err)
		core, err = s.core.Statements(cols.Columns, s.archiveTable().quoted())
		require.NoError(t, err)
		return core, s.statements(cols)
	},
	SQL: (*Store).sql,
	Archive: func(t *testing.T, s *Store, db *sql.DB) {
		conn, err := db.Conn(t.Context())
		require.NoError(t, err)
		defer conn.Close()
		_, err = s.ensureArchive(t.Context(), conn, s.archiveTable())
		require.NoError(t, err)
	},
	Mapped:  func(db *sql.DB, cols map[string]string) (*Store, error) { return New(db, WithColumns(cols)) },
	Renamed: RenamedColumns(),
	Golden:  func(t *testing.T, name, got string) { testsvc.Golden(t, name, got, *updateGolden) },
}

// TestStatements checks every statement against testdata and prepares it
// on a database file: see sqltest.RunStatements.
func TestStatements(t *testing.T) {
	t.Parallel()
	sqltest.RunStatements(t, stmts)
}

// statements returns, by name, the statements the Store builds itself (not
// through sqlcore) for a table with cols.
func (s *Store) statements(cols columns) map[string]string {
	t, archive := s.table.quoted(), s.archiveTable().quoted()
	out := map[string]string{
		"reschedule":    s.rescheduleSQL(cols.Columns, false, 2),
		"refund":        s.rescheduleSQL(cols.Columns, true, 2),
		"kill":          s.killSQL(cols.Columns, 2),
		"insert":        s.insertSQL(sqlcore.InsertColumns(cols.Columns), 2),
		"stats":         fmt.Sprintf(statsSQL, t),
		"payload sizes": fmt.Sprintf(payloadSizesSQL(t, sqlcore.SelectColumns(cols.Columns)), "?, ?"),
		"columns":       columnsSQL,
		"indexes":       indexesSQL,
		"archive pick":  fmt.Sprintf(archivePick, t),
		"archive new":   fmt.Sprintf(archiveCreate, t, quoteIdent("prepare_check"), "id INTEGER PRIMARY KEY, x TEXT"),
		"archive add":   fmt.Sprintf(archiveAddColumn, t, archive, quoteIdent("x"), "TEXT"),
		"more due":      s.moreDueSQL(cols),
	}
	two := []*outbox.Message{{RowID: 1, Attempt: 1}, {RowID: 2, Attempt: 2}}
	out["ack"], _ = s.ackSQL(two, false)
	out["ack delete"], _ = s.ackSQL(two, true)
	for _, p := range sqlcore.ClaimVariants() {
		name := fmt.Sprintf("claim ordered=%v block=%v payload=%d", p.Ordered, p.BlockOnDead, p.MaxPayload)
		q, sel := s.claimSQL(cols, p)
		out[name] = q
		if !p.Ordered {
			continue
		}
		out[name+" runs"] = s.runsSQL(cols, p, sel)
		out[name+" heads scan"] = s.headsSQL(p, sel) // a table without the head index
		if ord := s.orderedClaimSQL(cols, p, sel); ord != nil {
			out[name+" walk"], out[name+" beyond"], out[name+" heads"] = ord.walk, ord.beyond, ord.heads
		}
	}
	return out
}
