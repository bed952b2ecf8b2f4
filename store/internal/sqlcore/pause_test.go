package sqlcore

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPause(t *testing.T) {
	var p Pause
	require.False(t, p.Skip(), "the zero value is no pause")
	p.Start(2)
	require.True(t, p.Skip())
	require.True(t, p.Skip())
	require.False(t, p.Skip())
	require.Zero(t, p.Left())

	// Concurrent uses skip exactly as many times as the pause lasts.
	p.Start(50)
	var wg sync.WaitGroup
	var mu sync.Mutex
	skipped := 0
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if p.Skip() {
					mu.Lock()
					skipped++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, 50, skipped)
	require.Zero(t, p.Left())
}
