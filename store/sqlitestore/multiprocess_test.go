package sqlitestore_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/internal/sqltest"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// childEnv, when set to a database path, turns the test binary into a
// claimer process (see TestMain).
const childEnv = "OUTBOX_SQLITESTORE_CHILD"

// runChildClaimer claims and acks rows of the database at path until none is
// left, printing each claimed row id on stdout. It returns the exit code.
func runChildClaimer(path string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sqlitestore.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	s, err := sqlitestore.New(db)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	n, err := claimUntilDone(ctx, s, db, func(m *outbox.Message) { fmt.Fprintln(out, m.RowID) })
	if err != nil {
		fmt.Fprintf(os.Stderr, "after %d rows: %v\n", n, err)
		return 1
	}
	return 0
}

// claimUntilDone claims batches of 7 and acks them until no row is left
// unclaimed, calling seen for every claimed row. It returns how many it claimed.
func claimUntilDone(ctx context.Context, s *sqlitestore.Store, db *sql.DB, seen func(*outbox.Message)) (int, error) {
	total := 0
	for ctx.Err() == nil {
		c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 7, Lease: time.Hour})
		if err != nil {
			return total, err
		}
		if len(c.Malformed) > 0 {
			return total, fmt.Errorf("malformed rows: %v", c.Malformed[0].Err)
		}
		for _, m := range c.Messages {
			seen(m)
		}
		total += len(c.Messages)
		if len(c.Messages) > 0 {
			if _, err := s.Ack(ctx, outbox.AckParams{Messages: c.Messages}); err != nil {
				return total, err
			}
			continue
		}
		var left int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox_message WHERE retry_count = 0").Scan(&left); err != nil {
			return total, err
		}
		if left == 0 {
			return total, nil
		}
	}
	return total, ctx.Err()
}

// TestSeveralProcessesNeverShareARow runs claimers in three child processes
// and two goroutines of this one on one database file: every row must be
// claimed exactly once.
func TestSeveralProcessesNeverShareARow(t *testing.T) {
	t.Parallel()
	const rows, children, local = 600, 3, 2
	s, db := newStore(t)
	path := dbPath(t, db)
	fill(t, db, s, rows)

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
	defer cancel()
	var (
		mu     sync.Mutex
		counts = map[int64]int{}
		wg     sync.WaitGroup
		errs   = make(chan error, children+local)
	)
	record := func(id int64) {
		mu.Lock()
		counts[id]++
		mu.Unlock()
	}
	for i := range children {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+path)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Start())
		wg.Go(func() {
			if err := cmd.Wait(); err != nil {
				errs <- fmt.Errorf("child %d: %v: %s", i, err, stderr.String())
				return
			}
			sc := bufio.NewScanner(&stdout)
			for sc.Scan() {
				id, err := strconv.ParseInt(sc.Text(), 10, 64)
				if err != nil {
					errs <- fmt.Errorf("child %d printed %q", i, sc.Text())
					return
				}
				record(id)
			}
		})
	}
	for range local {
		wg.Go(func() {
			if _, err := claimUntilDone(ctx, s, db, func(m *outbox.Message) { record(m.RowID) }); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, counts, rows, "every row claimed")
	for id, n := range counts {
		require.Equal(t, 1, n, "row %d claimed %d times", id, n)
	}
	require.Equal(t, rows, sqltest.Count(t, db, "outbox_message WHERE status = 1 AND retry_count = 1"))
}

// TestClaimWithoutImmediateTxLock shows that claims do not depend on Open's
// _txlock=immediate: on handles opened with only a busy_timeout (deferred
// transactions, rollback journal), concurrent claimers still never share a
// row and never fail with SQLITE_BUSY, because a claim's first statement writes.
func TestClaimWithoutImmediateTxLock(t *testing.T) {
	t.Parallel()
	const rows, claimers = 400, 4
	path := testsvc.SQLitePath(t)
	plain := func() *sql.DB {
		db, err := sql.Open(sqlitestore.DriverName, "file:"+path+"?_pragma=busy_timeout(10000)")
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		return db
	}
	db := plain()
	s, err := sqlitestore.New(db)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	fill(t, db, s, rows)

	var (
		mu     sync.Mutex
		counts = map[int64]int{}
		wg     sync.WaitGroup
		errs   = make(chan error, claimers)
	)
	for range claimers {
		db := plain()
		s, err := sqlitestore.New(db)
		require.NoError(t, err)
		wg.Go(func() {
			_, err := claimUntilDone(t.Context(), s, db, func(m *outbox.Message) {
				mu.Lock()
				counts[m.RowID]++
				mu.Unlock()
			})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, counts, rows)
	for id, n := range counts {
		require.Equal(t, 1, n, "row %d claimed %d times", id, n)
	}
}

func fill(t *testing.T, db *sql.DB, s *sqlitestore.Store, n int) {
	t.Helper()
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = sqltest.Msg("order", strconv.Itoa(i))
	}
	require.NoError(t, sqltest.Write(db, s)(t.Context(), msgs...))
}

func dbPath(t *testing.T, db *sql.DB) string {
	t.Helper()
	var seq int
	var name, file string
	require.NoError(t, db.QueryRow("PRAGMA database_list").Scan(&seq, &name, &file))
	return file
}
