package jsretry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/jsretry"
)

// flaky is a JetStream whose CreateStream fails with errs in turn, then
// succeeds. Only CreateStream is used; a server cannot be made to refuse
// a store on demand.
type flaky struct {
	jetstream.JetStream
	errs  []error
	calls int
}

func (f *flaky) CreateStream(context.Context, jetstream.StreamConfig) (jetstream.Stream, error) {
	f.calls++
	if f.calls <= len(f.errs) {
		return nil, f.errs[f.calls-1]
	}
	return nil, nil
}

func TestCreateStream(t *testing.T) {
	t.Parallel()
	store := &jetstream.APIError{Code: 500, ErrorCode: jsretry.ErrCodeStoreCreate, Description: "error creating store for stream"}
	inUse := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamNameInUse, Description: "stream name already in use"}
	cases := []struct {
		name      string
		errs      []error
		wantCalls int
		wantErr   string // substring of the error; "" = success
	}{
		{"FirstTry", nil, 1, ""},
		{"StoreCreateOnceThenOK", []error{store}, 2, ""},
		{"StoreCreateWrapped", []error{fmt.Errorf("create: %w", store), store}, 3, ""},
		{"StoreCreateEveryTime", []error{store, store, store, store, store}, jsretry.Attempts, "creating store"},
		{"OtherErrorAtOnce", []error{inUse}, 1, "already in use"},
		{"PlainErrorAtOnce", []error{errors.New("boom")}, 1, "boom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			js := &flaky{errs: tc.errs}
			_, err := jsretry.CreateStream(t.Context(), js, jetstream.StreamConfig{Name: "s"})
			require.Equal(t, tc.wantCalls, js.calls)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestCreateStreamStopsWithContext(t *testing.T) {
	t.Parallel()
	store := &jetstream.APIError{Code: 500, ErrorCode: jsretry.ErrCodeStoreCreate}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	js := &flaky{errs: []error{store, store, store, store}}
	_, err := jsretry.CreateStream(ctx, js, jetstream.StreamConfig{Name: "s"})
	require.ErrorIs(t, err, store)
	require.Equal(t, 1, js.calls)
}
