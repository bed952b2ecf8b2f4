package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testsvc"
)

// asMain makes the test binary act as the outbox command when re-executed
// by a test, so that main's signal handling and exit codes run for real.
const asMain = "OUTBOX_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		os.Args = append([]string{"outbox"}, os.Args[1:]...)
		main()
		return
	}
	os.Exit(m.Run())
}

// command returns the test binary set up to run main with args.
func command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMain+"=1")
	return cmd
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--help"}, 0, ""},
		{[]string{"migrate", "--db", "oracle://x"}, 2, "outbox: db: unknown scheme \"oracle\"; want postgres://, postgresql://, sqlite://, mysql://\n"},
		{[]string{"migrate", "--db", "sqlite:///nonexistent/dir/x.db"}, 1, "outbox: open sqlite database: "},
	} {
		out, err := command(t.Context(), tc.args...).CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		require.Equal(t, tc.code, code, "%v: %s", tc.args, out)
		require.True(t, strings.HasPrefix(string(out), tc.stderr), "%v: %s", tc.args, out)
	}
}

// SIGTERM makes a running relay drain and exit 0.
func TestRelayStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + testsvc.SQLitePath(t)
	out, err := command(t.Context(), "migrate", "--db", db).CombinedOutput()
	require.NoError(t, err, "%s", out)

	natsURL := testsvc.NATSURL(t)
	stream := strings.ToUpper(testsvc.Name(t))
	cfg := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(
		"brokers:\n  - name: events\n    url: %s\n    stream: %s\n    prefix: %q\nlog_format: text\n",
		natsURL, stream, strings.ToLower(stream)+".")), 0o600))
	t.Cleanup(func() { deleteStream(t, natsURL, stream) })

	cmd := command(t.Context(), "relay", "--config", cfg, "--db", db)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	waitFor := func(what string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "stderr ended before %q", what)
				if strings.Contains(l, what) {
					return
				}
			case <-deadline:
				t.Fatalf("no %q on stderr within 20 s", what)
			}
		}
	}
	waitFor(`msg="relay started"`)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	waitFor(`msg="daemon stopped"`)
	for range lines { // drain until the pipe closes
	}
	require.NoError(t, cmd.Wait(), "exit code 0 after SIGTERM")
}

// deleteStream removes a JetStream stream the relay created.
func deleteStream(t *testing.T, natsURL, stream string) {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Logf("delete stream %s: %v", stream, err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = js.DeleteStream(ctx, stream)
}
