package sqlitestore

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/store/internal/sqlcore"
)

// TestStatementsPrepare prepares every statement the Store builds, for each
// shape of table its statements depend on, on a database file: a statement
// that does not compile, or names a column or index the table lacks, fails
// here rather than in the first claim that runs it.
func TestStatementsPrepare(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		open func(*testing.T) (*Store, *sql.DB)
	}{
		{"Migrated", orderedStore},
		{"ContractOnly", contractStore},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, db := c.open(t)
			cols, err := s.columns(t.Context(), db)
			require.NoError(t, err)
			conn, err := db.Conn(t.Context())
			require.NoError(t, err)
			_, err = s.ensureArchive(t.Context(), conn, s.archiveTable())
			require.NoError(t, err)
			require.NoError(t, conn.Close())
			core, err := s.core.Statements(cols.Columns, s.archiveTable().quoted())
			require.NoError(t, err)
			require.NoError(t, sqlcore.Prepare(t.Context(), db, core, s.statements(cols)))
		})
	}
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
		if ord := s.orderedClaimSQL(cols, p, sel); ord != nil {
			out[name+" walk"], out[name+" beyond"], out[name+" heads"] = ord.walk, ord.beyond, ord.heads
		}
	}
	return out
}
