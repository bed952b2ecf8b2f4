package outbox_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

// claimHook records the errors of the claims it sees.
type claimHook struct {
	mu   sync.Mutex
	errs []error
}

func (h *claimHook) OnClaim(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, err)
}

// HookClaim sees every claim, the empty ones too: a claim on a table that
// is not there fails, and once it is there, a claim that finds nothing
// succeeds, which is what tells a readiness check that claims work again.
func TestHookClaimSeesFailedAndEmptyClaims(t *testing.T) {
	t.Parallel()
	db, err := sqlitestore.Open(testsvc.SQLitePath(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	st, err := sqlitestore.New(db)
	require.NoError(t, err)
	h := &claimHook{}
	r := fastRelay(t, st, outboxtest.NewPublisher(), outbox.WithHooks(h))
	ctx := context.Background()

	_, err = r.Step(ctx)
	require.ErrorIs(t, err, sqlitestore.ErrNoTable)
	require.NoError(t, st.Migrate(ctx))
	_, err = r.Step(ctx)
	require.NoError(t, err)

	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.errs, 2)
	require.ErrorIs(t, h.errs[0], sqlitestore.ErrNoTable)
	require.NoError(t, h.errs[1], "an empty claim is a claim that worked")
}
