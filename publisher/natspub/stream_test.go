package natspub_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/natspub"
)

func TestEnsureStream(t *testing.T) {
	t.Parallel()
	_, js := connect(t, testsvc.NATSURL(t))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	info := func(name string) jetstream.StreamConfig {
		t.Helper()
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		return s.CachedInfo().Config
	}
	own := func(t *testing.T) string {
		name := testsvc.Name(t)
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
		return name
	}

	t.Run("CreatesWithFileStorageAndDefaultWindow", func(t *testing.T) {
		name := own(t)
		require.NoError(t, natspub.EnsureStream(ctx, js, name, []string{name + ".>"}, 0))
		cfg := info(name)
		require.Equal(t, jetstream.FileStorage, cfg.Storage)
		require.Equal(t, natspub.DefaultDuplicateWindow, cfg.Duplicates)
		require.Equal(t, []string{name + ".>"}, cfg.Subjects)

		require.NoError(t, natspub.EnsureStream(ctx, js, name, []string{name + ".>"}, 0), "idempotent")
		require.Equal(t, cfg, info(name))
	})

	t.Run("AddsMissingSubjectsOnly", func(t *testing.T) {
		name := own(t)
		require.NoError(t, natspub.EnsureStream(ctx, js, name, []string{name + ".orders.>"}, time.Minute))
		// Covered by the existing wildcard: nothing to add (adding it would overlap).
		require.NoError(t, natspub.EnsureStream(ctx, js, name, []string{name + ".orders.paid"}, time.Minute))
		require.Equal(t, []string{name + ".orders.>"}, info(name).Subjects)
		require.NoError(t, natspub.EnsureStream(ctx, js, name, []string{name + ".orders.>", name + ".payments"}, time.Minute))
		require.Equal(t, []string{name + ".orders.>", name + ".payments"}, info(name).Subjects)
	})

	t.Run("KeepsOperatorSettingsAndRaisesWindow", func(t *testing.T) {
		name := own(t)
		testsvc.CreateStream(t, js, jetstream.StreamConfig{
			Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage,
			MaxMsgs: 1000, Duplicates: 30 * time.Second,
		})
		require.NoError(t, natspub.EnsureStream(ctx, js, name, []string{name + ".>"}, 5*time.Minute))
		cfg := info(name)
		require.Equal(t, 5*time.Minute, cfg.Duplicates, "a shorter window is raised")
		require.Equal(t, jetstream.MemoryStorage, cfg.Storage, "storage kept")
		require.EqualValues(t, 1000, cfg.MaxMsgs, "limits kept")

		require.NoError(t, natspub.EnsureStream(ctx, js, name, []string{name + ".>"}, time.Minute))
		require.Equal(t, 5*time.Minute, info(name).Duplicates, "a longer window is never lowered")
	})

	t.Run("RefusesWindowLongerThanMaxAge", func(t *testing.T) {
		name := own(t)
		testsvc.CreateStream(t, js, jetstream.StreamConfig{
			Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage,
			MaxAge: time.Minute, Duplicates: 30 * time.Second,
		})
		err := natspub.EnsureStream(ctx, js, name, []string{name + ".>"}, 0)
		require.ErrorContains(t, err, "max age")
	})

	t.Run("ConcurrentCallers", func(t *testing.T) {
		name := own(t)
		errs := make(chan error, 4)
		for range 4 {
			go func() { errs <- natspub.EnsureStream(ctx, js, name, []string{name + ".>"}, 0) }()
		}
		for range 4 {
			require.NoError(t, <-errs)
		}
		require.Equal(t, []string{name + ".>"}, info(name).Subjects)
	})

	t.Run("BadInput", func(t *testing.T) {
		require.ErrorContains(t, natspub.EnsureStream(ctx, js, "", []string{"x"}, 0), "name is empty")
		require.ErrorContains(t, natspub.EnsureStream(ctx, js, "x", nil, 0), "no subjects")
	})
}
