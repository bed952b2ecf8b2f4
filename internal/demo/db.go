package demo

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// dialect is the SQL flavour of a service database.
type dialect int

const (
	sqliteDialect dialect = iota + 1
	postgresDialect
)

func (d dialect) String() string {
	if d == postgresDialect {
		return "PostgreSQL"
	}
	return "SQLite"
}

// rebind turns the ? placeholders of a query into $1, $2, ... for PostgreSQL.
// The demo's queries hold no ? inside literals.
func (d dialect) rebind(q string) string {
	if d != postgresDialect {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// serviceTables names one path's tables. The names are built by the demo from
// a fixed prefix and a random run id, never from user input.
type serviceTables struct {
	// The payment service's database.
	orders string // id, status
	outbox string // the outbox path's outbox table; "" on the other paths
	// The shipping service's database.
	shipments string // one row per message processed: order_id, message_id
	inbox     string // processed message ids (package inbox creates it, and a _seq table)
}

func newServiceTables(prefix string, withOutbox bool) serviceTables {
	t := serviceTables{
		orders:    prefix + "_orders",
		shipments: prefix + "_shipments",
		inbox:     prefix + "_inbox",
	}
	if withOutbox {
		t.outbox = prefix + "_outbox"
	}
	return t
}

// all returns every table the run creates on this path.
func (t serviceTables) all() []string {
	names := []string{t.orders, t.shipments, t.inbox, t.inbox + "_seq"}
	if t.outbox != "" {
		// and the table of relays its ordered relay heartbeats in
		names = append(names, t.outbox, t.outbox+"_relays")
	}
	return names
}

// Order statuses in the orders table.
const (
	statusPending = "pending"
	statusPaid    = "paid"
)

// createOrders creates the payment service's orders table with n pending
// orders, ids 1..n.
func createOrders(ctx context.Context, db *sql.DB, d dialect, table string, n int) error {
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL)"); err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("insert orders: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	const chunk = 500
	for lo := 1; lo <= n; lo += chunk {
		hi := min(lo+chunk-1, n)
		var q strings.Builder
		args := make([]any, 0, hi-lo+1)
		q.WriteString("INSERT INTO " + table + " (id, status) VALUES ")
		for id := lo; id <= hi; id++ {
			if id > lo {
				q.WriteString(", ")
			}
			q.WriteString("(?, '" + statusPending + "')")
			args = append(args, id)
		}
		if _, err := tx.ExecContext(ctx, d.rebind(q.String()), args...); err != nil {
			return fmt.Errorf("insert orders: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("insert orders: %w", err)
	}
	return nil
}

// createShipments creates the shipping service's shipments table.
func createShipments(ctx context.Context, db *sql.DB, table string) error {
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (order_id BIGINT NOT NULL, message_id VARCHAR(64) NOT NULL)"); err != nil {
		return fmt.Errorf("create shipments table: %w", err)
	}
	return nil
}

// markPaid is the payment service's business write: pending -> paid.
func markPaid(ctx context.Context, tx *sql.Tx, d dialect, t serviceTables, id int) error {
	res, err := tx.ExecContext(ctx, d.rebind("UPDATE "+t.orders+" SET status = ? WHERE id = ? AND status = ?"),
		statusPaid, id, statusPending)
	if err != nil {
		return fmt.Errorf("mark order %d paid: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n != 1 {
		return fmt.Errorf("mark order %d paid: %d rows changed, want 1", id, n)
	}
	return nil
}

// recordShipment is the shipping service's effect: one shipment row, in the
// transaction that also records the message in the inbox.
func recordShipment(ctx context.Context, tx *sql.Tx, d dialect, t serviceTables, orderID int64, messageID string) error {
	_, err := tx.ExecContext(ctx, d.rebind("INSERT INTO "+t.shipments+" (order_id, message_id) VALUES (?, ?)"),
		orderID, messageID)
	if err != nil {
		return fmt.Errorf("ship order %d: %w", orderID, err)
	}
	return nil
}

// tally is what the final queries count on one path.
type tally struct {
	paid, unpaid int // orders by status
	shipments    int // shipment rows: messages processed
	stuck        int // paid, never shipped
	ghosts       int // shipped, never paid
}

// count reads the orders (from the payment service's database) and the
// shipments (from the shipping service's) of one path and compares them.
func count(ctx context.Context, payDB, shipDB *sql.DB, t serviceTables) (tally, error) {
	var c tally
	paid := map[int64]bool{}
	err := scanRows(ctx, payDB, "SELECT id, status FROM "+t.orders, func(rows *sql.Rows) error {
		var id int64
		var status string
		if err := rows.Scan(&id, &status); err != nil {
			return err
		}
		paid[id] = status == statusPaid
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("count orders: %w", err)
	}
	shipped := map[int64]bool{}
	err = scanRows(ctx, shipDB, "SELECT order_id FROM "+t.shipments, func(rows *sql.Rows) error {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		c.shipments++
		shipped[id] = true
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("count shipments: %w", err)
	}
	for id, isPaid := range paid {
		switch {
		case isPaid && !shipped[id]:
			c.paid++
			c.stuck++
		case isPaid:
			c.paid++
		case shipped[id]:
			c.unpaid++
			c.ghosts++
		default:
			c.unpaid++
		}
	}
	return c, nil
}

// scanRows runs q and calls scan for each row.
func scanRows(ctx context.Context, db *sql.DB, q string, scan func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// dropTables drops the named tables, ignoring ones that do not exist.
func dropTables(ctx context.Context, db *sql.DB, names []string) error {
	var first error
	for _, n := range names {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+n); err != nil && first == nil {
			first = fmt.Errorf("drop table %s: %w", n, err)
		}
	}
	return first
}
