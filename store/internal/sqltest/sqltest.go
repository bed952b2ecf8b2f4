// Package sqltest holds the tests that the database/sql stores (mysqlstore,
// sqlitestore) share beyond the conformance suite (storetest): checks that
// need a *sql.DB, the store's own constructor or options, or the
// database's DDL, run on a real database given by each store's tests.
// What differs per database (the DDL, error sentinels, extra cases) comes in
// as parameters.
package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// Store is what the shared tests use of a database/sql store.
type Store interface {
	outbox.Store
	outbox.TxInserter[*sql.Tx]
	Migrate(ctx context.Context) error
	Table() string
}

// Write returns a function that commits msgs in one transaction on db
// through s's Writer, rolling it back when the write fails.
func Write(db *sql.DB, s outbox.TxInserter[*sql.Tx]) func(ctx context.Context, msgs ...*outbox.Message) error {
	w := outbox.NewWriter(s)
	return func(ctx context.Context, msgs ...*outbox.Message) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := w.Write(ctx, tx, msgs...); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
}

// Msg returns a message of the aggregate with a small JSON payload.
func Msg(aggType, aggID string) *outbox.Message {
	return &outbox.Message{AggregateType: aggType, AggregateID: aggID, EventType: "E", Payload: []byte(`{"x":1}`)}
}

// Count returns SELECT COUNT(*) FROM from.
func Count(t *testing.T, db *sql.DB, from string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+from).Scan(&n))
	return n
}

// writerTransaction writes messages and a row of a business table (made by
// ordersDDL, a table orders with an auto-numbered id and a text status) in
// one transaction, rolled back and then committed: the messages go with
// the business row.
func writerTransaction(t *testing.T, s Store, db *sql.DB, ordersDDL string) {
	t.Helper()
	ctx := t.Context()
	w := outbox.NewWriter(s)
	_, err := db.ExecContext(ctx, ordersDDL)
	require.NoError(t, err)
	for _, commit := range []bool{false, true} {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, "INSERT INTO orders (status) VALUES ('paid')")
		require.NoError(t, err)
		require.NoError(t, w.Write(ctx, tx, Msg("order", "1"), Msg("order", "1")))
		if commit {
			require.NoError(t, tx.Commit())
		} else {
			require.NoError(t, tx.Rollback())
		}
		want := 0
		if commit {
			want = 2
		}
		require.Equal(t, want, Count(t, db, s.Table()), "commit=%v", commit)
		require.Equal(t, want/2, Count(t, db, "orders"), "commit=%v", commit)
	}
}

// TableName is a case of the WithTable check: a name given to WithTable and whether
// New takes it.
type TableName struct {
	Name string
	OK   bool
}

// tableNames are the names every store takes or refuses alike.
var tableNames = []TableName{
	{"outbox_message", true},
	{"_x", true},
	{"Outbox2", true},
	{"", false},
	{"1outbox", false},
	{"x; DROP TABLE y", false},
	{"a`b", false},
	{`a"b`, false},
	{"a'b", false},
	{"a b", false},
	{"a.b.c", false},
	{".outbox", false},
	{"outbox.", false},
	{"outbox\x00", false},
	{"outbox--", false},
	{"tablé", false},
}

// withTable checks the table names New takes (and Table then returns) and
// those it refuses with an error naming WithTable: the names all stores
// share, then more. newStore is New with WithTable(name), on a *sql.DB
// that is never used.
func withTable[S Store](t *testing.T, newStore func(table string) (S, error), more ...TableName) {
	t.Helper()
	for _, c := range append(tableNames[:len(tableNames):len(tableNames)], more...) {
		t.Run(fmt.Sprintf("%q", c.Name), func(t *testing.T) {
			s, err := newStore(c.Name)
			if c.OK {
				require.NoError(t, err)
				require.Equal(t, c.Name, s.Table())
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), "WithTable")
			require.Nil(t, s)
		})
	}
}

// Harness is how a database/sql store, of type S with options of type O,
// plugs into [Run].
type Harness[S Store, O any] struct {
	// Database returns the name of an empty database of t's own (a DSN, a
	// file's path) that Open opens.
	Database func(t testing.TB) string
	Open     func(name string) (*sql.DB, error)
	// New and WithTable are the store's.
	New       func(db *sql.DB, opts ...O) (S, error)
	WithTable func(table string) O
	// ErrNoTable is what the Store's calls match when the table is missing.
	ErrNoTable error
	// Migrators is how many handles migrate the same database at once.
	Migrators int
	// TableNames are the names New takes or refuses beyond those all stores
	// share (the longest name, qualified and quoted names).
	TableNames []TableName
	// NoContractDDL makes a table outbox_message with an id, a message_id
	// and a payload, and no other column.
	NoContractDDL string
	// OrdersDDL makes a business table orders with an auto-numbered id and
	// a text status.
	OrdersDDL string
	// MalformedDDL makes a table outbox_message loose enough to hold the
	// malformed rows, Malformed the rows planted beyond those all stores
	// share.
	MalformedDDL string
	Malformed    []Malformed
}

// handles returns n handles on one empty database of t's own, each its own
// *sql.DB (as separate processes would have), closed when t ends.
func (h Harness[S, O]) handles(t *testing.T, n int) []*sql.DB {
	t.Helper()
	name := h.Database(t)
	dbs := make([]*sql.DB, n)
	for i := range dbs {
		dbs[i] = OpenDB(t, h.Open, name)
	}
	return dbs
}

func (h Harness[S, O]) store(t *testing.T, db *sql.DB) S {
	t.Helper()
	s, err := h.New(db)
	require.NoError(t, err)
	return s
}

// Run runs, in parallel subtests, the checks that the database/sql stores
// share beyond storetest: the table names New takes and refuses, New's
// panic on a nil *sql.DB, Migrate (see [Migrate]), a Writer's messages in
// a business transaction, and the malformed rows a hand-made table holds.
func Run[S Store, O any](t *testing.T, h Harness[S, O]) {
	t.Helper()
	t.Run("WithTable", func(t *testing.T) {
		t.Parallel()
		withTable(t, func(table string) (S, error) { return h.New(&sql.DB{}, h.WithTable(table)) }, h.TableNames...)
	})
	t.Run("NewPanicsOnNilDB", func(t *testing.T) {
		t.Parallel()
		require.Panics(t, func() { _, _ = h.New(nil) })
	})
	t.Run("Migrate", func(t *testing.T) {
		t.Parallel()
		migrate(t, h)
	})
	t.Run("WriterTransaction", func(t *testing.T) {
		t.Parallel()
		db := h.handles(t, 1)[0]
		s := h.store(t, db)
		require.NoError(t, s.Migrate(t.Context()))
		writerTransaction(t, s, db, h.OrdersDDL)
	})
	t.Run("MalformedRows", func(t *testing.T) {
		t.Parallel()
		db := h.handles(t, 1)[0]
		malformedRows(t, h.store(t, db), db, h.MalformedDDL, h.Malformed...)
	})
}

// migrate runs, as parallel subtests, the checks of Migrate and of the
// table's detection that the stores share: Migrate twice keeps the rows,
// several handles migrate one database at once, a missing table is
// reported (and found once migrated), a table without the contract's
// columns names them.
func migrate[S Store, O any](t *testing.T, h Harness[S, O]) {
	t.Helper()
	t.Run("TwiceKeepsRows", func(t *testing.T) {
		t.Parallel()
		db := h.handles(t, 1)[0]
		s := h.store(t, db)
		require.NoError(t, s.Migrate(t.Context()))
		require.NoError(t, Write(db, s)(t.Context(), Msg("a", "1")))
		require.NoError(t, s.Migrate(t.Context()))
		require.Equal(t, 1, Count(t, db, "outbox_message"))
	})
	t.Run("ConcurrentFromSeveralHandles", func(t *testing.T) {
		t.Parallel()
		dbs := h.handles(t, h.Migrators)
		errs := make(chan error, len(dbs))
		for _, db := range dbs {
			s := h.store(t, db)
			go func() { errs <- s.Migrate(t.Context()) }()
		}
		for range dbs {
			require.NoError(t, <-errs)
		}
	})
	t.Run("MissingTableIsReported", func(t *testing.T) {
		t.Parallel()
		s := h.store(t, h.handles(t, 1)[0])
		_, err := s.Claim(t.Context(), outbox.ClaimParams{Limit: 1, Lease: time.Minute})
		require.ErrorIs(t, err, h.ErrNoTable)
		require.NoError(t, s.Migrate(t.Context()))
		_, err = s.Claim(t.Context(), outbox.ClaimParams{Limit: 1, Lease: time.Minute})
		require.NoError(t, err, "a failed detection is not cached")
	})
	t.Run("TableWithoutContractColumns", func(t *testing.T) {
		t.Parallel()
		db := h.handles(t, 1)[0]
		_, err := db.Exec(h.NoContractDDL)
		require.NoError(t, err)
		s := h.store(t, db)
		_, err = s.Claim(t.Context(), outbox.ClaimParams{Limit: 1, Lease: time.Minute})
		require.ErrorContains(t, err, "lacks contract columns: aggregate_type, aggregate_id, event_type, status")
	})
}

// Malformed is a row of the MalformedRows check: its aggregate_id,
// payload, headers and topic as bound in the INSERT, and the text the
// error of its Claim.Malformed entry contains ("" for a well-formed row,
// which Check, if set, checks further).
type Malformed struct {
	Name                       string
	AggID, Payload, Hdr, Topic any
	WantErr                    string
	Check                      func(t *testing.T, m *outbox.Message)
}

// malformed are the rows every store's hand-made table can hold and reads
// alike.
var malformed = []Malformed{
	{Name: "Good", AggID: "1", Payload: `{"a":1}`, Hdr: `{"k":"v"}`, Topic: "t", Check: func(t *testing.T, m *outbox.Message) {
		require.Equal(t, map[string]string{"k": "v"}, m.Headers)
		require.Equal(t, "t", m.Topic)
	}},
	{Name: "PayloadNotJSON", AggID: "1", Payload: `{"a":`, WantErr: "payload is not valid JSON"},
	{Name: "PayloadEmpty", AggID: "1", Payload: ``, WantErr: "payload is not valid JSON"},
	{Name: "AggregateIDEmpty", AggID: "", Payload: `{}`, WantErr: "aggregate_id is empty"},
	{Name: "HeadersNotJSON", AggID: "1", Payload: `{}`, Hdr: `k=v`, WantErr: "headers are not a JSON object of strings"},
	{Name: "TopicNotUTF8", AggID: "1", Payload: `{}`, Topic: []byte("\xc3"), WantErr: "topic is not valid UTF-8"},
}

// malformedRows plants, in the table outbox_message of db that ddl makes
// (loose enough to hold them), the rows every store reads alike and more,
// and one claim takes them all: each well-formed row among the messages,
// each other in Claim.Malformed with its error.
func malformedRows(t *testing.T, s outbox.Store, db *sql.DB, ddl string, more ...Malformed) {
	t.Helper()
	ctx := t.Context()
	_, err := db.ExecContext(ctx, ddl)
	require.NoError(t, err)
	cases := append(malformed[:len(malformed):len(malformed)], more...)
	names := map[int64]string{}
	for _, c := range cases {
		res, err := db.ExecContext(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload, headers, topic)
			VALUES (?, 'a', ?, 'E', ?, ?, ?)`, c.Name, c.AggID, c.Payload, c.Hdr, c.Topic)
		require.NoError(t, err)
		id, err := res.LastInsertId()
		require.NoError(t, err)
		names[id] = c.Name
	}
	cl, err := s.Claim(ctx, outbox.ClaimParams{Limit: 100, Lease: time.Minute})
	require.NoError(t, err)
	got := map[string]string{}
	byName := map[string]*outbox.Message{}
	for _, m := range cl.Messages {
		got[names[m.RowID]] = ""
		byName[names[m.RowID]] = m
	}
	for _, mr := range cl.Malformed {
		require.Equal(t, 1, mr.Message.Attempt)
		got[names[mr.Message.RowID]] = mr.Err.Error()
	}
	for _, c := range cases {
		e, ok := got[c.Name]
		require.True(t, ok, "%s not claimed", c.Name)
		if c.WantErr == "" {
			require.Empty(t, e, c.Name)
			if c.Check != nil {
				c.Check(t, byName[c.Name])
			}
		} else {
			require.Contains(t, e, c.WantErr, c.Name)
		}
	}
	require.Equal(t, "Good", names[cl.Messages[0].RowID])
}

// OpenDB opens the database name with open and closes it when t ends.
func OpenDB(t testing.TB, open func(name string) (*sql.DB, error), name string) *sql.DB {
	t.Helper()
	db, err := open(name)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// Migrated returns the store newStore makes on db with opts, its table
// migrated, and db.
func Migrated[S Store, O any](t testing.TB, newStore func(db *sql.DB, opts ...O) (S, error), db *sql.DB, opts ...O) (S, *sql.DB) {
	t.Helper()
	s, err := newStore(db, opts...)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	return s, db
}

// OnTable runs ddl on db, which makes a table, and returns the store
// newStore makes on db with opts, not migrated, and db.
func OnTable[S Store, O any](t testing.TB, newStore func(db *sql.DB, opts ...O) (S, error), db *sql.DB, ddl string, opts ...O) (S, *sql.DB) {
	t.Helper()
	_, err := db.ExecContext(t.Context(), ddl)
	require.NoError(t, err)
	s, err := newStore(db, opts...)
	require.NoError(t, err)
	return s, db
}

// RenameColumns renames the columns of table on db as cols says, one ALTER
// TABLE a column.
func RenameColumns(t testing.TB, db *sql.DB, table string, cols map[string]string) {
	t.Helper()
	for c, to := range cols {
		if c != to {
			_, err := db.ExecContext(t.Context(), fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", table, c, to))
			require.NoError(t, err)
		}
	}
}

// MigrateUpgrades checks Migrate on s, a store on db's table outbox_message
// that has the contract's columns only: a message written before survives
// two Migrates, the table then has the optional columns (columns returns the
// names of its columns) and passes check (the database's own changes), and
// the store writes and reads the new columns.
func MigrateUpgrades(t *testing.T, s Store, db *sql.DB, columns func() []string, check func()) {
	t.Helper()
	ctx := t.Context()
	write := Write(db, s)
	require.NoError(t, write(ctx, &outbox.Message{AggregateType: "a", AggregateID: "1", EventType: "E",
		Payload: []byte(`{}`), Headers: map[string]string{"k": "v"}}))

	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Migrate(ctx), "twice")
	cols := columns()
	for _, c := range []string{"headers", "topic", "partition_key", "last_error"} {
		require.Contains(t, cols, c)
	}
	require.Equal(t, 1, Count(t, db, "outbox_message"), "the row written before survives")
	check()

	require.NoError(t, write(ctx, &outbox.Message{AggregateType: "a", AggregateID: "2", EventType: "E",
		Payload: []byte(`{}`), Headers: map[string]string{"k": "v"}, Topic: "t1", PartitionKey: "p"}))
	c, err := s.Claim(ctx, outbox.ClaimParams{Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, c.Messages, 2)
	require.Empty(t, c.Messages[0].Headers, "written before the column existed")
	require.Equal(t, map[string]string{"k": "v"}, c.Messages[1].Headers)
	require.Equal(t, "t1", c.Messages[1].Topic)
	require.Equal(t, "p", c.Messages[1].PartitionKey)
}
