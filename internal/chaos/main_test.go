package chaos

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The driver logs every connection a crashed server broke; the
	// scenarios break them on purpose.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	code := m.Run()
	bins.cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// bins are the programs the scenarios run, built once per test process.
var bins binaries

type binaries struct {
	once   sync.Once
	dir    string
	outbox string // the real `outbox` command
	nats   string // nats-server built from the module's version, else the system's
	err    error
}

// get builds the binaries on first use. The relay is built with -race when
// the tests are, so that a data race in the relay under faults shows up in
// its log (and fails the scenario).
func (b *binaries) get(t *testing.T) (outboxBin, natsBin string) {
	t.Helper()
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "outbox-chaos-bin-")
		if b.err != nil {
			return
		}
		// PostgreSQL templates live here too, and run as another account.
		if b.err = os.Chmod(b.dir, 0o755); b.err != nil {
			return
		}
		root, err := filepath.Abs("../..")
		if err != nil {
			b.err = err
			return
		}
		args := []string{"build"}
		if raceEnabled {
			args = append(args, "-race")
		}
		b.outbox = filepath.Join(b.dir, "outbox")
		if b.err = goBuild(root, append(args, "-o", b.outbox, "./cmd/outbox")...); b.err != nil {
			return
		}
		// Debian's nats-server (2.9) predates fixes to JetStream's crash
		// recovery; the module pins a current server, so build that.
		b.nats = filepath.Join(b.dir, "nats-server")
		if err := goBuild(root, "build", "-o", b.nats, "github.com/nats-io/nats-server/v2"); err != nil {
			path, lerr := exec.LookPath("nats-server")
			if lerr != nil {
				b.err = fmt.Errorf("build nats-server: %v; and none installed: %v", err, lerr)
				return
			}
			b.nats = path
		}
	})
	if b.err != nil {
		t.Fatalf("chaos binaries: %v", b.err)
	}
	return b.outbox, b.nats
}

func (b *binaries) cleanup() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// goBuild runs the go command in dir, bounded to five minutes (a cold cache
// on a busy machine).
func goBuild(dir string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goCmd); err != nil {
		goCmd = "go"
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %v: %v\n%s", args, err, out)
	}
	return nil
}
