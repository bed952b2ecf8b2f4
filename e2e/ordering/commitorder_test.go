package ordering_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// commitOrderSQL is, per database, the business table of the demonstration,
// the ways a business transaction can lock its aggregate before writing its
// message, and a query counting transactions that wait for such a lock.
var commitOrderSQL = map[string]struct {
	setup   []string
	locks   map[string]string // name -> statement with one parameter, the order id
	waiters string
}{
	"postgres": {
		setup: []string{
			`CREATE TABLE orders (id varchar(64) PRIMARY KEY, version int NOT NULL DEFAULT 0)`,
			`INSERT INTO orders (id) VALUES ('A')`,
		},
		locks: map[string]string{
			"UpdateBusinessRow": `UPDATE orders SET version = version + 1 WHERE id = $1 /* lock-aggregate */`,
			"AdvisoryLock":      `SELECT pg_advisory_xact_lock(hashtextextended('order/' || $1, 0)) /* lock-aggregate */`,
		},
		waiters: `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%/* lock-aggregate */%' AND pid <> pg_backend_pid()`,
	},
	"mysql": {
		setup: []string{
			`CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, version INT NOT NULL DEFAULT 0) ENGINE = InnoDB`,
			`INSERT INTO orders (id) VALUES ('A')`,
		},
		locks: map[string]string{
			"UpdateBusinessRow": `UPDATE orders SET version = version + 1 WHERE id = ? /* lock-aggregate */`,
			"SelectForUpdate":   `SELECT id FROM orders WHERE id = ? FOR UPDATE /* lock-aggregate */`,
		},
		// A session of this test's database (each test has its own) busy with the
		// lock statement. (InnoDB's INNODB_TRX misses a wait that begins while the
		// optimizer reads the row by its primary key, state "Statistics".)
		waiters: `SELECT count(*) FROM information_schema.PROCESSLIST
			WHERE DB = DATABASE() AND INFO LIKE '%/* lock-aggregate */%' AND ID <> CONNECTION_ID()`,
	},
}

// drainBySteps steps relay until the broker has want distinct messages.
func drainBySteps(t *testing.T, r *outbox.Relay, br *broker, want int) {
	t.Helper()
	testsvc.Eventually(t, 10*time.Second, func() bool {
		_, err := r.Step(context.Background())
		require.NoError(t, err)
		return br.distinct() >= want
	}, "%d messages delivered", want)
}

// TestSameAggregateCommitOrder shows the caveat of docs/ordering.md: ordering
// follows the id order of committed rows, and ids are handed out at insert,
// not at commit. Two transactions that write messages for the same aggregate
// without locking anything in common can commit out of id order, and the
// relay then publishes the later message first, since the earlier one is not
// visible yet. A business transaction
// that locks its aggregate (its row, or an advisory lock) before it writes
// the message closes the gap: the second transaction cannot insert until
// the first committed.
func TestSameAggregateCommitOrder(t *testing.T) {
	t.Parallel()
	for _, db := range backends {
		q := commitOrderSQL[db.name]
		t.Run(db.name+"/NoLock", func(t *testing.T) {
			t.Parallel()
			be := db.new(t)
			ctx := context.Background()
			br := newBroker(t, nil)
			r, err := outbox.NewRelay(be.store, br, outbox.WithOrdering(true, outbox.DeadBlocks))
			require.NoError(t, err)

			t1, err := be.begin(ctx)
			require.NoError(t, err)
			defer t1.rollback(ctx) //nolint:errcheck // a no-op after commit
			require.NoError(t, t1.write(ctx, seqMsg("A", 0)))
			t2, err := be.begin(ctx)
			require.NoError(t, err)
			require.NoError(t, t2.write(ctx, seqMsg("A", 1)))
			require.NoError(t, t2.commit(ctx)) // the later message commits first

			drainBySteps(t, r, br, 1)
			require.NoError(t, t1.commit(ctx))
			drainBySteps(t, r, br, 2)
			require.Equal(t, []int{1, 0}, br.firstOrder("A"), "published in commit order, not write order")
			require.NotEmpty(t, br.stats().Violations)
		})
		for lockName, lock := range q.locks {
			t.Run(db.name+"/"+lockName, func(t *testing.T) {
				t.Parallel()
				be := db.new(t)
				ctx := context.Background()
				for _, s := range q.setup {
					require.NoError(t, be.exec(ctx, s))
				}
				br := newBroker(t, nil)
				r, err := outbox.NewRelay(be.store, br, outbox.WithOrdering(true, outbox.DeadBlocks))
				require.NoError(t, err)

				t1, err := be.begin(ctx)
				require.NoError(t, err)
				defer t1.rollback(ctx) //nolint:errcheck // a no-op after commit
				require.NoError(t, t1.exec(ctx, lock, "A"))
				require.NoError(t, t1.write(ctx, seqMsg("A", 0)))

				done := make(chan error, 1)
				go func() {
					t2, err := be.begin(ctx)
					if err == nil {
						err = t2.exec(ctx, lock, "A") // waits for t1
						if err == nil {
							err = t2.write(ctx, seqMsg("A", 1))
						}
						if err == nil {
							err = t2.commit(ctx)
						} else {
							_ = t2.rollback(ctx)
						}
					}
					done <- err
				}()
				testsvc.Eventually(t, 10*time.Second, func() bool {
					select {
					case err := <-done:
						t.Fatalf("the second transaction did not wait: %v", err)
					default:
					}
					return be.mustQueryInt(t, q.waiters) == 1
				}, "the second transaction waits for the aggregate's lock")
				ev, err := r.Step(ctx)
				require.NoError(t, err)
				require.Zero(t, ev.Claimed, "nothing is committed yet")
				select {
				case err := <-done:
					t.Fatalf("the second transaction committed while the first held the lock: %v", err)
				default:
				}

				require.NoError(t, t1.commit(ctx))
				require.NoError(t, <-done)
				drainBySteps(t, r, br, 2)
				require.Equal(t, []int{0, 1}, br.firstOrder("A"))
				require.Empty(t, br.stats().Violations)
			})
		}
	}
}
