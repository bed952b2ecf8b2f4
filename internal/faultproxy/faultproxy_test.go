package faultproxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer is a real TCP server that writes back what it reads and
// half-closes when its peer does. errs receives each connection's end.
type echoServer struct {
	addr string
	errs chan error
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	e := &echoServer{addr: ln.Addr().String(), errs: make(chan error, 64)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				_, err := io.Copy(c, c)
				if err == nil {
					err = c.(*net.TCPConn).CloseWrite()
				}
				select {
				case e.errs <- err:
				default:
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return e
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip writes msg and reads it back within 5 s.
func roundTrip(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err := c.Write(msg)
	require.NoError(t, err)
	got := make([]byte, len(msg))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, msg, got)
	require.NoError(t, c.SetDeadline(time.Time{}))
}

// requireSilent asserts that nothing can be read from c for d.
func requireSilent(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(d)))
	n, err := c.Read(make([]byte, 1))
	require.Zero(t, n)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, c.SetReadDeadline(time.Time{}))
}

// requireRefused asserts that a new connection to addr is reset: the kernel
// completes the handshake, the proxy resets it, and the RST surfaces either
// in the dial or in the first read.
func requireRefused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		require.ErrorIs(t, err, syscall.ECONNRESET)
		return
	}
	defer c.Close()
	requireReset(t, c)
}

// requireReset asserts that reading c fails with a connection reset, promptly.
func requireReset(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := io.ReadAll(c)
	require.ErrorIs(t, err, syscall.ECONNRESET)
}

func TestPassForwardsBothWays(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := New(t, e.addr)
	require.Equal(t, e.addr, p.Target())

	// Several connections at once, each larger than the proxy's queue, so
	// that chunking and back-pressure are exercised.
	var wg sync.WaitGroup
	for range 6 {
		c := dial(t, p.Addr())
		wg.Go(func() {
			msg := make([]byte, 1<<20)
			_, _ = rand.Read(msg)
			require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
			go func() { _, _ = c.Write(msg) }()
			got := make([]byte, len(msg))
			_, err := io.ReadFull(c, got)
			require.NoError(t, err)
			require.True(t, bytes.Equal(msg, got), "echoed bytes differ")
		})
	}
	wg.Wait()
	require.Equal(t, 6, p.Conns())
	mode, lat := p.Mode()
	require.Equal(t, Pass, mode)
	require.Zero(t, lat)
}

func TestHalfCloseIsForwarded(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := New(t, e.addr)

	c := dial(t, p.Addr())
	_, err := c.Write([]byte("hello"))
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	got, err := io.ReadAll(c) // the echo server sees EOF, answers and half-closes
	require.NoError(t, err)
	require.Equal(t, "hello", string(got))
	require.Eventually(t, func() bool { return p.Conns() == 0 }, 5*time.Second, 10*time.Millisecond, "link not released after both halves closed")
}

func TestCutResetsBothSidesAndRefusesNewConnections(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := New(t, e.addr)

	c := dial(t, p.Addr())
	roundTrip(t, c, []byte("before"))

	p.Cut()
	mode, _ := p.Mode()
	require.Equal(t, Reset, mode)
	requireReset(t, c)
	select { // the target's side was reset too
	case err := <-e.errs:
		require.ErrorIs(t, err, syscall.ECONNRESET)
	case <-time.After(5 * time.Second):
		t.Fatal("the target's connection was not closed")
	}
	require.Zero(t, p.Conns())

	// New connections are accepted by the kernel, then reset at once.
	for range 3 {
		requireRefused(t, p.Addr())
	}

	p.Restore()
	roundTrip(t, dial(t, p.Addr()), []byte("after"))
}

func TestBlackholeHoldsBytesUntilRestore(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := New(t, e.addr)

	open := dial(t, p.Addr())
	roundTrip(t, open, []byte("warm"))

	p.Blackhole()
	_, err := open.Write([]byte("held"))
	require.NoError(t, err)
	late := dial(t, p.Addr()) // a connection made during the outage is silent too
	_, err = late.Write([]byte("late"))
	require.NoError(t, err)
	requireSilent(t, open, 300*time.Millisecond)
	requireSilent(t, late, 50*time.Millisecond)
	require.Equal(t, 2, p.Conns(), "blackhole keeps the sockets")

	p.Restore()
	for _, tc := range []struct {
		c    net.Conn
		want string
	}{{open, "held"}, {late, "late"}} {
		require.NoError(t, tc.c.SetReadDeadline(time.Now().Add(5*time.Second)))
		got := make([]byte, len(tc.want))
		_, err := io.ReadFull(tc.c, got)
		require.NoError(t, err)
		require.Equal(t, tc.want, string(got))
	}
}

func TestLatencyDelaysEachDirection(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := New(t, e.addr)
	c := dial(t, p.Addr())
	roundTrip(t, c, []byte("warm"))

	const d = 150 * time.Millisecond
	p.Latency(d)
	start := time.Now()
	roundTrip(t, c, []byte("slow"))
	require.GreaterOrEqual(t, time.Since(start), 2*d, "a round trip crosses the proxy twice")

	p.Restore()
	start = time.Now()
	roundTrip(t, c, []byte("fast"))
	// Below the 2d floor that latency imposes (a wide margin on a loaded machine).
	require.Less(t, time.Since(start), 2*d, "latency still applied after Restore")
}

func TestUnreachableTargetResetsClient(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())

	p := New(t, closed)
	requireRefused(t, p.Addr())
	require.Zero(t, p.Conns())
}

func TestMaxConnsBoundsTheProxy(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := New(t, e.addr)
	p.mu.Lock()
	p.maxConns = 2
	p.mu.Unlock()

	a, b := dial(t, p.Addr()), dial(t, p.Addr())
	roundTrip(t, a, []byte("a"))
	roundTrip(t, b, []byte("b"))
	requireRefused(t, p.Addr())

	require.NoError(t, a.Close())
	require.Eventually(t, func() bool { return p.Conns() < 2 }, 5*time.Second, 10*time.Millisecond, "closed connection still counted")
	roundTrip(t, dial(t, p.Addr()), []byte("c"))
}

func TestCloseEndsConnectionsAndListener(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p, err := Start(e.addr)
	require.NoError(t, err)

	passing := dial(t, p.Addr())
	roundTrip(t, passing, []byte("x"))
	p.Blackhole()
	held := dial(t, p.Addr())
	_, err = held.Write([]byte("y"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Conns() == 2 }, 5*time.Second, 10*time.Millisecond, "second link not up")

	require.NoError(t, p.Close()) // returns only once every goroutine ended (goleak checks the rest)
	requireReset(t, passing)
	requireReset(t, held)
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.NoError(t, p.Close(), "Close is idempotent")
}

func TestNewStopsWithTheTest(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	var addr string
	t.Run("Inner", func(t *testing.T) {
		p := New(t, e.addr)
		addr = p.Addr()
		roundTrip(t, dial(t, addr), []byte("z"))
	})
	_, err := net.DialTimeout("tcp", addr, time.Second)
	require.True(t, errors.Is(err, syscall.ECONNREFUSED), "proxy still listening after its test: %v", err)
}

func TestModeString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m    Mode
		want string
	}{{Pass, "pass"}, {Blackhole, "blackhole"}, {Reset, "reset"}, {Mode(9), "mode(9)"}} {
		require.Equal(t, tc.want, tc.m.String())
	}
}
