// Package sqlids holds what the database/sql stores (mysqlstore,
// sqlitestore) do alike with lists of row ids.
package sqlids

import (
	"context"
	"database/sql"
	"strings"
)

// Count returns how many rows of table (quoted for SQL) have one of ids, with
// one statement of at most chunk ids (at least 1) at a time, using ?
// placeholders.
func Count(ctx context.Context, db *sql.DB, table string, ids []int64, chunk int) (int, error) {
	total := 0
	for lo := 0; lo < len(ids); lo += chunk {
		part := ids[lo:min(lo+chunk, len(ids))]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		q := "SELECT count(*) FROM " + table + " WHERE id IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(part)), ", ") + ")"
		var n int
		if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
