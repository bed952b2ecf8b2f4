package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/stretchr/testify/require"
)

// TestStateGuard walks an order through guarded transitions on every database.
func TestStateGuard(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			tdb := newTestDB(t, d)
			ctx := context.Background()
			_, err := tdb.db.ExecContext(ctx, `CREATE TABLE orders (id VARCHAR(20) PRIMARY KEY, status VARCHAR(20))`)
			require.NoError(t, err)
			for _, id := range []string{"o-1", "o-2"} {
				_, err = tdb.db.ExecContext(ctx, "INSERT INTO orders (id, status) VALUES ("+tdb.ph(1)+", 'PENDING')", id)
				require.NoError(t, err)
			}
			g, err := inbox.NewStateGuard(d, "orders", "id", "status")
			require.NoError(t, err)

			for i, step := range []struct {
				key      string
				to       string
				from     []any
				want     inbox.Transition
				wantErr  error
				wantFrom string // the state a *StateError reports
			}{
				{key: "o-1", to: "PAID", from: []any{"PENDING"}, want: inbox.Applied},
				{key: "o-1", to: "PAID", from: []any{"PENDING"}, want: inbox.AlreadyApplied},
				{key: "o-1", to: "SHIPPED", from: []any{"PAID", "PACKED"}, want: inbox.Applied},
				{key: "o-1", to: "PAID", from: []any{"PENDING"}, wantErr: inbox.ErrUnexpectedState, wantFrom: "SHIPPED"},
				{key: "o-2", to: "CANCELLED", from: []any{"PENDING", "PAID"}, want: inbox.Applied},
				{key: "o-2", to: "PAID", from: []any{"PENDING"}, wantErr: inbox.ErrUnexpectedState, wantFrom: "CANCELLED"},
				{key: "o-9", to: "PAID", from: []any{"PENDING"}, wantErr: inbox.ErrNotFound},
			} {
				got, err := g.Apply(ctx, tdb.db, step.key, step.to, step.from...)
				if step.wantErr != nil {
					require.ErrorIs(t, err, step.wantErr, "step %d", i)
					var se *inbox.StateError
					if errors.As(err, &se) {
						require.Equal(t, step.wantFrom, se.Current, "step %d", i)
					}
					continue
				}
				require.NoError(t, err, "step %d", i)
				require.Equal(t, step.want, got, "step %d", i)
			}
		})
	}
}

// TestStateGuardConcurrent: of many transactions applying one transition at
// once, exactly one applies it; the others see it already applied.
func TestStateGuardConcurrent(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			tdb := newTestDB(t, d)
			ctx := context.Background()
			_, err := tdb.db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, status INTEGER NOT NULL)`)
			require.NoError(t, err)
			_, err = tdb.db.ExecContext(ctx, "INSERT INTO orders (id, status) VALUES (1, 0)")
			require.NoError(t, err)
			g, err := inbox.NewStateGuard(d, "orders", "id", "status")
			require.NoError(t, err)
			var applied, already atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for try := 1; ; try++ { // a deadlock or busy error is retried, as a consumer would
						if try > 50 {
							t.Error("50 tries failed")
							return
						}
						tx, err := tdb.db.BeginTx(ctx, nil)
						if err != nil {
							continue
						}
						got, err := g.Apply(ctx, tx, 1, 1, 0) // integer states work too
						if err == nil {
							err = tx.Commit()
						} else {
							_ = tx.Rollback()
						}
						if err != nil {
							continue
						}
						if got == inbox.Applied {
							applied.Add(1)
						} else {
							already.Add(1)
						}
						return
					}
				})
			}
			wg.Wait()
			require.Equal(t, int64(1), applied.Load())
			require.Equal(t, int64(7), already.Load())
		})
	}
}

// TestStateGuardWithInbox: the guard inside an inbox handler, the usual pair.
func TestStateGuardWithInbox(t *testing.T) {
	t.Parallel()
	tdb := newTestDB(t, inbox.Postgres)
	ctx := context.Background()
	_, err := tdb.db.ExecContext(ctx, `CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL)`)
	require.NoError(t, err)
	_, err = tdb.db.ExecContext(ctx, `INSERT INTO orders VALUES ('o-1', 'PENDING')`)
	require.NoError(t, err)
	in := newInbox(t, tdb.db, inbox.Postgres)
	g, err := inbox.NewStateGuard(inbox.Postgres, "orders", "id", "status")
	require.NoError(t, err)
	var results []inbox.Transition
	h := func(ctx context.Context, tx *sql.Tx, m *outbox.Message) error {
		tr, err := g.Apply(ctx, tx, m.AggregateID, "PAID", "PENDING")
		results = append(results, tr)
		return err
	}
	// Two different messages that mean the same thing (a payment retried by the producer).
	for _, id := range []string{"pay-1", "pay-2", "pay-1"} {
		_, err := in.Process(ctx, &outbox.Message{MessageID: id, AggregateID: "o-1", Payload: []byte(`{}`)}, h)
		require.NoError(t, err)
	}
	require.Equal(t, []inbox.Transition{inbox.Applied, inbox.AlreadyApplied}, results, "the inbox skips pay-1's copy")
}

func TestNewStateGuardValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		d                 inbox.Dialect
		table, key, state string
		wantErr           bool
	}{
		{"Plain", inbox.Postgres, "orders", "id", "status", false},
		{"Qualified", inbox.MySQL, "shop.orders", "id", "status", false},
		{"Dialect", "db2", "orders", "id", "status", true},
		{"InjectTable", inbox.SQLite, "orders; DROP TABLE x", "id", "status", true},
		{"QualifiedColumn", inbox.Postgres, "orders", "o.id", "status", true},
		{"QuoteInColumn", inbox.MySQL, "orders", "id", "sta`tus", true},
		{"EmptyColumn", inbox.SQLite, "orders", "id", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := inbox.NewStateGuard(tc.d, tc.table, tc.key, tc.state)
			if tc.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
		})
	}
	g, err := inbox.NewStateGuard(inbox.SQLite, "orders", "id", "status")
	require.NoError(t, err)
	_, err = g.Apply(context.Background(), nil, 1, "PAID")
	require.ErrorContains(t, err, "no from state")
	_, err = g.Apply(context.Background(), nil, 1, "PAID", "PENDING", "PAID")
	require.ErrorContains(t, err, "also a from state")
}
