package sqlcore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/outboxkit/outbox"
)

// Prepare prepares every statement of sets (by name) on db, closes it, and
// returns an error naming each statement the database refused: the stores'
// tests run it on the statements they build, against the real database.
func Prepare(ctx context.Context, db *sql.DB, sets ...map[string]string) error {
	var errs []error
	for _, set := range sets {
		for _, name := range slices.Sorted(maps.Keys(set)) {
			st, err := db.PrepareContext(ctx, set[name])
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w\n%s", name, err, set[name]))
				continue
			}
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// ClaimVariants are the claims whose statements differ: unordered and
// ordered, with dead rows blocking or not, with and without a payload limit.
func ClaimVariants() []outbox.ClaimParams {
	var out []outbox.ClaimParams
	for _, ordered := range []bool{false, true} {
		for _, block := range []bool{false, true} {
			for _, maxPayload := range []int{0, 100} {
				out = append(out, outbox.ClaimParams{Limit: 10, Lease: time.Minute, Ordered: ordered, BlockOnDead: block,
					MaxPayload: maxPayload})
			}
		}
	}
	return out
}
