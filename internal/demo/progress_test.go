package demo

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBar(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		done, total, width int
		want               string
	}{
		{0, 100, 4, "░░░░"},
		{50, 100, 4, "██░░"},
		{99, 100, 4, "███░"},
		{100, 100, 4, "████"},
		{150, 100, 4, "████"},
		{3, 0, 2, "░░"},
	} {
		require.Equal(t, tc.want, bar(tc.done, tc.total, tc.width), "%d of %d", tc.done, tc.total)
	}
}

func TestIsTerminal(t *testing.T) {
	t.Parallel()
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminal(f), "a regular file")
	require.False(t, isTerminal(&bytes.Buffer{}))
}

// An event quoting a broker's error shows its control runes escaped.
func TestProgressEventEscapesControls(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	p := newProgress(&out, false, time.Now(), func(bool) [2]string { return [2]string{"", ""} })
	p.event("publish failed: %v", "nats: \x1b]8;;http://x\x07link\r")
	require.Contains(t, out.String(), `publish failed: nats: \x1b]8;;http://x\alink\r`)
	require.NotContains(t, out.String(), "\x1b")
}

func TestProgressModes(t *testing.T) {
	t.Parallel()
	status := func(withBar bool) [2]string {
		if withBar {
			return [2]string{"[bar] 5/10", "shipped 3"}
		}
		return [2]string{"5/10", "shipped 3"}
	}
	t.Run("Lines", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		p := newProgress(&out, false, time.Now(), status)
		require.Equal(t, progressLines, p.mode, "a buffer is not a terminal")
		p.event("broker %s", "dark")
		p.tick()
		p.finish()
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		require.Len(t, lines, 2)
		require.Regexp(t, `^ +0\.0s  broker dark$`, lines[0])
		require.Regexp(t, `^ +0\.0s  5/10  shipped 3$`, lines[1])
		require.NotContains(t, out.String(), "\x1b")
	})
	t.Run("Bar", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		p := newProgress(&out, false, time.Now(), status)
		p.mode = progressBar // as on a terminal
		p.tick()
		require.Equal(t, "\r  0.0s  [bar] 5/10"+eraseLine+"\nshipped 3"+eraseLine, out.String())
		out.Reset()
		p.tick() // redraws over the two lines
		require.True(t, strings.HasPrefix(out.String(), lineUp+"\r"), "%q", out.String())
		out.Reset()
		p.event("broker back") // erases the bar, prints the line, redraws the bar below it
		require.True(t, strings.HasPrefix(out.String(), "\r"+eraseLine+lineUp+"\r"+eraseLine+"  0.0s  broker back\n\r"),
			"%q", out.String())
		out.Reset()
		p.finish()
		require.Equal(t, "\r"+eraseLine+lineUp+"\r"+eraseLine, out.String())
		out.Reset()
		p.finish()
		require.Empty(t, out.String(), "finish is idempotent")
	})
	t.Run("Quiet", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		p := newProgress(&out, true, time.Now(), status)
		p.event("broker dark")
		p.run(t.Context()) // returns at once
		p.finish()
		require.Empty(t, out.String())
	})
}
