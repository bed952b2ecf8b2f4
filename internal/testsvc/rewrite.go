package testsvc

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"testing"
)

// RewritingDB returns a database/sql handle on dsn through drv whose
// statements are rewritten by rewrite before they reach the database: a
// test's own SQL, written with the table contract's column names, then
// reads a table mapped by a store's WithColumns, as the store rewrites its
// own. The handle is closed when t ends.
func RewritingDB(t testing.TB, drv driver.Driver, dsn string, rewrite func(string) string) *sql.DB {
	t.Helper()
	var c driver.Connector = dsnConnector{drv, dsn}
	if dc, ok := drv.(driver.DriverContext); ok {
		var err error
		if c, err = dc.OpenConnector(dsn); err != nil {
			t.Fatalf("open connector: %v", err)
		}
	}
	db := sql.OpenDB(rewritingConnector{c, rewrite})
	t.Cleanup(func() { db.Close() })
	return db
}

type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.drv }

type rewritingConnector struct {
	driver.Connector
	rewrite func(string) string
}

func (c rewritingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return rewritingConn{conn, c.rewrite}, nil
}

// rewritingConn rewrites every statement it runs or prepares.
type rewritingConn struct {
	driver.Conn
	rewrite func(string) string
}

func (c rewritingConn) Prepare(q string) (driver.Stmt, error) { return c.Conn.Prepare(c.rewrite(q)) }

func (c rewritingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, c.rewrite(q))
	}
	return c.Conn.Prepare(c.rewrite(q))
}

func (c rewritingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return c.Conn.Begin() //nolint:staticcheck // the driver has no BeginTx
}

func (c rewritingConn) CheckNamedValue(v *driver.NamedValue) error {
	if n, ok := c.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c rewritingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

// ExecContext and QueryContext run a statement directly where the driver
// can (some statements, such as MySQL's ANALYZE TABLE, cannot be prepared
// and executed); driver.ErrSkip makes database/sql prepare it instead.
func (c rewritingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := c.Conn.(driver.ExecerContext); ok {
		return e.ExecContext(ctx, c.rewrite(q), args)
	}
	return nil, driver.ErrSkip
}

func (c rewritingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if e, ok := c.Conn.(driver.QueryerContext); ok {
		return e.QueryContext(ctx, c.rewrite(q), args)
	}
	return nil, driver.ErrSkip
}

// RenamedColumns returns a mapping of every column of the table contract to
// another name, for the stores' tests of WithColumns: Debezium's names for
// the message's columns, ob_ before the others'.
func RenamedColumns() map[string]string {
	return map[string]string{
		"id": "ob_id", "message_id": "ob_message_id", "aggregate_type": "aggregatetype", "aggregate_id": "aggregateid",
		"event_type": "type", "payload": "payload", "status": "ob_status", "retry_count": "ob_retry_count",
		"next_retry_at": "ob_next_retry_at", "created_at": "ob_created_at", "updated_at": "ob_updated_at",
		"headers": "ob_headers", "topic": "ob_topic", "partition_key": "ob_partition_key", "last_error": "ob_last_error",
		"content_type": "ob_content_type", "payload_bytes": "ob_payload_bytes", "deliver_at": "ob_deliver_at",
		"expires_at": "ob_expires_at",
	}
}
