package testsvc

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// PostgresSlot returns a name unique to t for a replication slot and its
// publication, and when t ends drops the slot (ending whatever streams it)
// and the publication of that name, whatever the test left: a slot left
// behind makes the shared server keep log forever. It calls NeedLogical
// first.
func PostgresSlot(t testing.TB) string {
	t.Helper()
	NeedLogical(t)
	name := Name(t)
	t.Cleanup(func() { DropPostgresSlot(t, name, name) })
	return name
}

// DropPostgresSlot drops the replication slot named slot, ending the
// process that streams it if one does, and the publication named
// publication ("" = none), if they exist. It fails t when the slot is
// still there after 10 s.
func DropPostgresSlot(t testing.TB, slot, publication string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := dropSlot(ctx, slot, publication); err != nil {
		t.Errorf("replication slot %s is left behind: %v; drop it: SELECT pg_drop_replication_slot('%s')", slot, err, slot)
	}
}

// StreamPostgresSlot streams the logical replication slot named slot
// (pgoutput, publication) on a replication connection of its own, so that
// the slot reads active, and returns the pid of the server process that
// streams it. The test reads nothing of the stream. The connection is
// closed when t ends, or earlier by the server (pg_terminate_backend).
func StreamPostgresSlot(t testing.TB, slot, publication string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, withQuery(PostgresURL(), "replication", "database"))
	if err != nil {
		Unavailable(t, "PostgreSQL", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	pid := int(conn.PID())
	query := "START_REPLICATION SLOT " + pgx.Identifier{slot}.Sanitize() +
		" LOGICAL 0/0 (proto_version '1', publication_names " + quoteLiteral(publication) + ")"
	conn.Frontend().Send(&pgproto3.Query{String: query})
	if err := conn.Frontend().Flush(); err != nil {
		t.Fatalf("start replication of slot %s: %v", slot, err)
	}
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("start replication of slot %s: %v", slot, err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyBothResponse:
			return pid
		case *pgproto3.ErrorResponse:
			t.Fatalf("start replication of slot %s: %s", slot, m.Message)
		}
	}
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := range len(s) {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
