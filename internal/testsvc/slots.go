package testsvc

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicationSlot returns the names of a replication slot and a
// publication for t, after the schema PostgresSchema gave it, and drops
// both when t ends, ending first whatever still streams the slot: a slot
// left behind makes the shared server keep its write-ahead log forever.
// It calls NeedLogical first.
func ReplicationSlot(t testing.TB, schema string) (slot, publication string) {
	t.Helper()
	NeedLogical(t)
	slot, publication = schema+"_slot", schema+"_pub"
	t.Cleanup(func() {
		if err := DropReplicationSlot(slot, publication); err != nil {
			t.Errorf("drop replication slot %s: %v", slot, err)
		}
	})
	return slot, publication
}

// DropReplicationSlot ends the connection that streams slot, if any, and
// drops the slot and the publication, retrying for up to 20 seconds while
// the server still counts the slot active.
func DropReplicationSlot(slot, publication string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return dropSlot(ctx, slot, publication)
}

// dropSlot drops the publication (unless "") and the slot, ending the
// connection that streams the slot first, until the slot is gone or ctx
// ends. A slot that does not exist is no error.
func dropSlot(ctx context.Context, slot, publication string) error {
	c, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if publication != "" {
		if _, err := c.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{publication}.Sanitize()); err != nil {
			return err
		}
	}
	for {
		_, _ = c.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		_, err = c.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// LeftoverSlots returns the replication slots that tests of this process
// made (named after PostgresSchema's schemas) and did not drop. A TestMain
// calls it after the tests to fail the run if any survived.
func LeftoverSlots() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		return nil, nil // no server, no slot
	}
	defer c.Close(context.Background())
	prefix := fmt.Sprintf("t%d\\_", os.Getpid()%100000)
	rows, err := c.Query(ctx, `SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE $1 || '%'`, prefix)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// NeedLogical skips t, or fails it under CI=true, unless the test
// PostgreSQL server has wal_level = logical, which the CDC relay's tests
// need and a stock server does not have (it takes a restart; .ci/run sets
// it). It reads the setting once per test binary.
func NeedLogical(t testing.TB) {
	t.Helper()
	level, err := walLevel()
	if err != nil {
		Unavailable(t, "PostgreSQL", err)
	}
	if level == "logical" {
		return
	}
	const fix = "as a superuser run ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL (.ci/run does both)"
	if InCI() {
		t.Fatalf("PostgreSQL's wal_level is %s; CDC tests need logical: %s", level, fix)
	}
	t.Skipf("skipped: PostgreSQL's wal_level is %s; CDC tests need logical: %s", level, fix)
}

// walLevel reads the test server's wal_level, once.
var walLevel = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var level string
	err = conn.QueryRow(ctx, "SHOW wal_level").Scan(&level)
	return level, err
})
