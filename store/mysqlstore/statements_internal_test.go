package mysqlstore

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
	Shapes: []sqltest.Shape[*Store]{
		{Name: "Migrated", Open: orderedStore}, {Name: "ContractOnly", Open: contractStore}, {Name: "NoIndexes", Open: bareStore}},
	Of: func(t *testing.T, s *Store, db *sql.DB) (core, own map[string]string) {
		info, err := s.tableInfo(t.Context(), db)
		require.NoError(t, err)
		core, err = s.core.Statements(info.Columns, s.archiveTable().quoted())
		require.NoError(t, err)
		return core, s.statements(info)
	},
	SQL: (*Store).sql,
	Archive: func(t *testing.T, s *Store, _ *sql.DB) {
		_, err := s.ensureArchive(t.Context())
		require.NoError(t, err)
	},
	Mapped:  func(db *sql.DB, cols map[string]string) (*Store, error) { return New(db, WithColumns(cols)) },
	Renamed: RenamedColumns(),
	Golden:  func(t *testing.T, name, got string) { testsvc.Golden(t, name, got, *updateGolden) },
}

// TestStatements checks every statement against testdata and prepares it
// on the server: see sqltest.RunStatements.
func TestStatements(t *testing.T) {
	t.Parallel()
	sqltest.RunStatements(t, stmts)
}

// statements returns, by name, the statements the Store builds itself (not
// through sqlcore) for a table with info.
func (s *Store) statements(info tableInfo) map[string]string {
	t := s.table.quoted()
	out := map[string]string{
		"lease":         s.leaseSQL(info) + " WHERE id IN (?, ?)",
		"reschedule":    s.rescheduleSQL(info.Columns, false, 2),
		"refund":        s.rescheduleSQL(info.Columns, true, 2),
		"kill":          s.killSQL(info.Columns, 2),
		"insert":        s.insertSQL(sqlcore.InsertColumns(info.Columns), 2),
		"stats":         fmt.Sprintf(statsSQL, t),
		"payload sizes": fmt.Sprintf(payloadSizesSQL(t, sqlcore.SelectColumns(info.Columns)), "?, ?"),
		"aggregates of": s.aggregatesOfSQL(2),
		"columns":       columnsSQL,
		"indexes":       indexesSQL,
		"primary key":   primaryKeySQL,
		"database":      databaseSQL,
		"migrate lock":  migrateLockSQL,
		"migrate free":  migrateUnlockSQL,
		"archive any":   fmt.Sprintf(archiveAnySQL, t),
		"archive pick":  fmt.Sprintf(archivePick, t),
		"archive like":  fmt.Sprintf(archiveCreate, t, s.archiveTable().quoted()),
		"archive add":   fmt.Sprintf(archiveAddColumn, t, s.archiveTable().quoted(), "`x`", "INT"),
	}
	same := []*outbox.Message{{RowID: 1, Attempt: 1}, {RowID: 2, Attempt: 1}}
	mixed := []*outbox.Message{{RowID: 1, Attempt: 1}, {RowID: 2, Attempt: 2}}
	for _, del := range []bool{false, true} {
		out[fmt.Sprintf("ack delete=%v", del)], _ = s.ackSQL(info, del, same)
		out[fmt.Sprintf("ack mixed delete=%v", del)], _ = s.ackSQL(info, del, mixed)
	}
	for _, p := range sqlcore.ClaimVariants() {
		name := fmt.Sprintf("claim ordered=%v block=%v payload=%d", p.Ordered, p.BlockOnDead, p.MaxPayload)
		qs, sel := s.claimSQLs(info, p)
		for i, q := range qs {
			out[fmt.Sprintf("%s lock %d", name, i)] = q
		}
		if !p.Ordered {
			continue
		}
		for i, q := range s.slotSQLs(info, outbox.ClaimParams{Limit: p.Limit, MaxPayload: p.MaxPayload}) {
			out[fmt.Sprintf("%s slot lock %d", name, i)] = q.query
		}
		out[name+" runs"] = s.runsSQL(info, p, 2)
		if info.claimIndex != "" && info.pkID {
			out[name+" front"] = s.frontScanSQL(info, p)
		}
		if ord := s.orderedClaimSQL(info, p, sel); ord != nil {
			out[name+" bound"], out[name+" walk"], out[name+" heads"] = ord.bound, ord.walk, ord.heads
		}
		if ord := s.orderedSlotSQL(info, p, sel); ord != nil {
			out[name+" slot bound"], out[name+" slot walk"], out[name+" slot heads"] = ord.bound, ord.walk, ord.heads
		}
		if pick, byID := s.slotPickSQL(info, outbox.ClaimParams{Limit: p.Limit, MaxPayload: p.MaxPayload}); pick != "" {
			out[name+" slot pick"], out[name+" slot by id"] = pick, fmt.Sprintf(byID, "?, ?")
		}
		for _, slot := range []bool{false, true} {
			h := s.headReadsFor(info, p, slot)
			n := fmt.Sprintf("%s heads slot=%v", name, slot)
			out[n+" fresh"], out[n+" by id"] = h.fresh, fmt.Sprintf(h.byID, "?, ?")
			if h.others != "" {
				out[n+" others"] = h.others
			}
		}
	}
	return out
}
