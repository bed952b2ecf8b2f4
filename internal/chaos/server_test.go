package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox/internal/testsvc"
)

// server is a private database or broker process on 127.0.0.1, on a data
// directory of its own, that a scenario can crash (kill -9) and start again
// on the same data and port. The shared services on this machine are never
// touched.
type server struct {
	name    string
	port    int
	logPath string
	command func() *exec.Cmd
	ready   func(ctx context.Context) error
	// tree makes crash kill the process's children as well: PostgreSQL
	// forks a backend per connection, each in a process group of its own.
	tree bool

	mu     sync.Mutex
	p      *proc
	log    *logWatcher
	starts int
}

// serverStartTimeout bounds a start, crash recovery included.
const serverStartTimeout = 60 * time.Second

// start starts the server and waits until ready answers. A process that
// exits at once (PostgreSQL finding the old server's shared memory still
// attached) is started again until the timeout.
func (s *server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		w, err := newLogWatcher(s.logPath)
		if err != nil {
			return err
		}
		s.log = w
	}
	deadline := time.Now().Add(serverStartTimeout)
	for {
		p, err := startProc(s.name, s.command(), s.log)
		if err != nil {
			return err
		}
		s.p = p
		s.starts++
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err = s.ready(ctx)
			cancel()
			if err == nil {
				return nil
			}
			if p.exited() || time.Now().After(deadline) {
				break
			}
			pause(50 * time.Millisecond)
		}
		p.kill()
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not get ready within %v: %v\n%s", s.name, serverStartTimeout, err, tail(s.logPath, 2000))
		}
		pause(200 * time.Millisecond)
	}
}

// crash kills the server with SIGKILL, with its children when tree is set,
// and waits until every killed process is gone.
func (s *server) crash() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil || s.p.exited() {
		return
	}
	var kids []int
	if s.tree {
		s.p.signal(syscall.SIGSTOP) // no new children while we list them
		kids = children(s.p.pid())
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
	}
	s.p.kill()
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range kids {
		for !gone(k) && time.Now().Before(deadline) {
			pause(10 * time.Millisecond)
		}
	}
}

// running reports whether the server process is up.
func (s *server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p != nil && !s.p.exited()
}

// close kills the server for good and closes its log.
func (s *server) close() {
	s.crash()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log != nil {
		_ = s.log.close()
	}
}

// freePort returns a TCP port on 127.0.0.1 that nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// pause sleeps for d. It is used only inside polling loops that have their
// own deadline.
func pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}

// owner is the account private PostgreSQL servers run as: postgres when
// the harness runs as root (PostgreSQL refuses root), else the current user.
type owner struct {
	uid, gid int
	cred     *syscall.Credential // nil: run as ourselves
}

func serverOwner() (owner, error) {
	if os.Geteuid() != 0 {
		return owner{uid: os.Geteuid(), gid: os.Getegid()}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return owner{}, fmt.Errorf("running as root and no postgres account to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return owner{uid: uid, gid: gid, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}, nil
}

// chownTree gives dir and everything under it to o.
func (o owner) chownTree(dir string) error {
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, o.uid, o.gid)
	})
}

// templates are data directories initialised once per test process and
// copied for each scenario (initdb and mariadb-install-db take seconds).
var templates struct {
	mu       sync.Mutex
	postgres string
	mysql    string
}

// postgresBin returns the directory of PostgreSQL's server binaries.
func postgresBin() (string, error) {
	if dir := os.Getenv("OUTBOX_CHAOS_PG_BIN"); dir != "" {
		return dir, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(matches) == 0 {
		if p, err := exec.LookPath("postgres"); err == nil {
			return filepath.Dir(p), nil
		}
		return "", errors.New("no postgres binary (set OUTBOX_CHAOS_PG_BIN)")
	}
	slices.Sort(matches)
	return filepath.Dir(matches[len(matches)-1]), nil
}

// startPostgres starts a private PostgreSQL on a copy of a template
// cluster, with trust authentication and fsync on, and returns it with the
// admin DSN (user postgres, database postgres). With logical it runs with
// wal_level = logical for CDC relays, and ends a replication connection
// whose reader stopped answering after walSenderTimeout, so that a
// SIGSTOPped relay frees its slot for a standby within seconds.
func startPostgres(t *testing.T, dir string, maxConns int, logical bool) (*server, string) {
	t.Helper()
	bin, err := postgresBin()
	if err != nil {
		testsvc.Unavailable(t, "PostgreSQL server binaries", err)
	}
	o, err := serverOwner()
	if err != nil {
		testsvc.Unavailable(t, "PostgreSQL server account", err)
	}
	templates.mu.Lock()
	if templates.postgres == "" {
		tdir := filepath.Join(bins.dir, "pg-template")
		if err := os.MkdirAll(tdir, 0o700); err == nil {
			err = o.chownTree(tdir)
		}
		cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(tdir, "data"), "-A", "trust",
			"-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			templates.mu.Unlock()
			t.Fatalf("initdb: %v\n%s", err, out)
		}
		templates.postgres = filepath.Join(tdir, "data")
	}
	tmpl := templates.postgres
	templates.mu.Unlock()

	pgdir := filepath.Join(dir, "postgres")
	data := filepath.Join(pgdir, "data")
	if err := os.MkdirAll(pgdir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", tmpl, data).CombinedOutput(); err != nil {
		t.Fatalf("copy postgres template: %v\n%s", err, out)
	}
	if err := o.chownTree(pgdir); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", port)
	s := &server{
		name: "postgres", port: port, logPath: filepath.Join(dir, "postgres.log"), tree: true,
		command: func() *exec.Cmd {
			cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", pgdir,
				"-c", "listen_addresses=127.0.0.1", "-c", fmt.Sprintf("max_connections=%d", maxConns),
				"-c", "superuser_reserved_connections=0", "-c", "fsync=on", "-c", "synchronous_commit=on",
				"-c", "shared_buffers=32MB", "-c", "log_min_messages=warning", "-c", "log_line_prefix=%m [%p] ")
			if logical {
				cmd.Args = append(cmd.Args, "-c", "wal_level=logical", "-c", "max_replication_slots=10",
					"-c", "max_wal_senders=10", "-c", "wal_sender_timeout="+walSenderTimeout.String())
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.cred}
			return cmd
		},
		ready: func(ctx context.Context) error { return pingSQL(ctx, "pgx", dsn) },
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s, dsn
}

// walSenderTimeout is the private PostgreSQL's wal_sender_timeout in the
// CDC cells: longer than three of the relays' status intervals (1 s), shorter
// than a SIGSTOP (the lease and two seconds).
const walSenderTimeout = 3 * time.Second

// mysqlBins returns the paths of mariadb-install-db (or mysql_install_db) and mariadbd.
func mysqlBins() (install, server string, err error) {
	for _, name := range []string{"mariadb-install-db", "mysql_install_db"} {
		if install, err = exec.LookPath(name); err == nil {
			break
		}
	}
	if err != nil {
		return "", "", fmt.Errorf("no mariadb-install-db: %w", err)
	}
	for _, p := range []string{"/usr/sbin/mariadbd", "/usr/sbin/mysqld"} {
		if _, err := os.Stat(p); err == nil {
			return install, p, nil
		}
	}
	if server, err = exec.LookPath("mariadbd"); err != nil {
		return "", "", fmt.Errorf("no mariadbd: %w", err)
	}
	return install, server, nil
}

// startMySQL starts a private MariaDB on a copy of a template data
// directory (root without a password, durable commits), and returns it
// with the admin DSN (go-sql-driver form, no database).
func startMySQL(t *testing.T, dir string, maxConns int) (*server, string) {
	t.Helper()
	install, bin, err := mysqlBins()
	if err != nil {
		testsvc.Unavailable(t, "MariaDB server binaries", err)
	}
	var userArgs []string
	if os.Geteuid() == 0 {
		userArgs = []string{"--user=root"}
	}
	templates.mu.Lock()
	if templates.mysql == "" {
		tdata := filepath.Join(bins.dir, "mysql-template")
		args := append([]string{"--no-defaults", "--datadir=" + tdata, "--auth-root-authentication-method=normal",
			"--skip-test-db"}, userArgs...)
		if out, err := exec.Command(install, args...).CombinedOutput(); err != nil {
			templates.mu.Unlock()
			t.Fatalf("mariadb-install-db: %v\n%s", err, out)
		}
		templates.mysql = tdata
	}
	tmpl := templates.mysql
	templates.mu.Unlock()

	mdir := filepath.Join(dir, "mysql")
	data := filepath.Join(mdir, "data")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", tmpl, data).CombinedOutput(); err != nil {
		t.Fatalf("copy mysql template: %v\n%s", err, out)
	}
	port := freePort(t)
	dsn := fmt.Sprintf("root@tcp(127.0.0.1:%d)/?timeout=5s&parseTime=true", port)
	s := &server{
		name: "mysql", port: port, logPath: filepath.Join(dir, "mysql.log"),
		command: func() *exec.Cmd {
			args := append([]string{"--no-defaults", "--datadir=" + data, fmt.Sprintf("--port=%d", port),
				"--bind-address=127.0.0.1", "--socket=" + filepath.Join(mdir, "mysqld.sock"),
				"--pid-file=" + filepath.Join(mdir, "mysqld.pid"), "--skip-name-resolve", "--skip-log-bin",
				fmt.Sprintf("--max-connections=%d", maxConns), "--innodb-buffer-pool-size=64M",
				"--innodb-flush-log-at-trx-commit=1", "--log-error=" + filepath.Join(mdir, "error.log")}, userArgs...)
			return exec.Command(bin, args...)
		},
		ready: func(ctx context.Context) error { return pingSQL(ctx, "mysql", dsn) },
	}
	if err := s.start(); err != nil {
		t.Fatalf("%v\n%s", err, tail(filepath.Join(mdir, "error.log"), 2000))
	}
	t.Cleanup(s.close)
	return s, dsn
}

// pingSQL opens one connection and pings it.
func pingSQL(ctx context.Context, driver, dsn string) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// startNATS starts a private nats-server with JetStream on a store
// directory of its own.
func startNATS(t *testing.T, dir string) (*server, string) {
	t.Helper()
	_, bin := bins.get(t)
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	store := filepath.Join(dir, "jetstream")
	s := &server{
		name: "nats", port: port, logPath: filepath.Join(dir, "nats.log"),
		command: func() *exec.Cmd {
			return exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", store)
		},
		ready: func(ctx context.Context) error {
			nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			_, err = js.AccountInfo(ctx)
			return err
		},
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s, url
}

// startRedis starts a private redis-server that appends every write to its
// AOF with fsync, so a kill -9 keeps what it confirmed.
func startRedis(t *testing.T, dir string) (*server, string) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testsvc.Unavailable(t, "redis-server binary", err)
	}
	port := freePort(t)
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	rdir := filepath.Join(dir, "redis")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &server{
		name: "redis", port: port, logPath: filepath.Join(dir, "redis.log"),
		command: func() *exec.Cmd {
			return exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
				"--appendonly", "yes", "--appendfsync", "always", "--dir", rdir, "--daemonize", "no")
		},
		ready: func(ctx context.Context) error {
			c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
			defer c.Close()
			return c.Ping(ctx).Err()
		},
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s, url
}
