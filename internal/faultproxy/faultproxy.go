package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Mode is what the proxy does with traffic.
type Mode int

const (
	// Pass forwards bytes both ways, after the configured latency if any.
	Pass Mode = iota
	// Blackhole keeps every socket open and forwards nothing: bytes already
	// read wait in the proxy, so both ends see a silent peer (a partition).
	// Restore delivers the held bytes in order.
	Blackhole
	// Reset closes every connection with a TCP RST and resets new ones as
	// soon as they are accepted (a broker that crashed).
	Reset
)

// String returns pass, blackhole or reset.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case Reset:
		return "reset"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// DefaultMaxConns is how many proxied connections a Proxy holds at once;
// connections beyond it are reset when accepted.
const DefaultMaxConns = 256

const (
	chunkSize   = 32 << 10 // bytes read at a time
	chunkQueue  = 16       // chunks held per direction (bounds memory to 512 KiB)
	dialTimeout = 5 * time.Second
)

// TB is the part of testing.TB that [New] uses, so that this package does not
// import testing. *testing.T and *testing.B satisfy it.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Proxy is a TCP proxy on 127.0.0.1 in front of one target address. Its
// methods are safe for concurrent use.
type Proxy struct {
	target   string
	ln       net.Listener
	maxConns int
	wg       sync.WaitGroup

	mu      sync.Mutex
	mode    Mode
	latency time.Duration
	changed chan struct{} // closed and replaced at every mode change
	links   map[*link]struct{}
	dialing int // accepted connections whose target dial is in progress
	closed  bool
	done    chan struct{} // closed by Close
}

// New starts a proxy to target (host:port) on 127.0.0.1 and a random port,
// in [Pass] mode, and closes it when t ends. It fails t if it cannot listen.
func New(t TB, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Start starts a proxy to target (host:port) on 127.0.0.1 and a random port,
// in [Pass] mode. The caller must Close it. The target is dialled for each
// accepted connection, so it need not be up yet.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	p := &Proxy{
		target:   target,
		ln:       ln,
		maxConns: DefaultMaxConns,
		changed:  make(chan struct{}),
		links:    make(map[*link]struct{}),
		done:     make(chan struct{}),
	}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr returns the proxy's host:port; point the client here instead of at the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut switches to [Reset]: every open connection is closed with a TCP RST
// (both the client's and the target's side) and new connections are reset
// as soon as they are accepted, until [Proxy.Restore].
func (p *Proxy) Cut() { p.set(Reset, 0) }

// Blackhole switches to [Blackhole]: sockets stay open and nothing is
// forwarded until [Proxy.Restore] (or [Proxy.Latency]), which delivers what
// was held. New connections are accepted and dialled but stay silent too.
func (p *Proxy) Blackhole() { p.set(Blackhole, 0) }

// Latency switches to [Pass] with every chunk of bytes delivered d after the
// proxy read it, in each direction (so a round trip takes at least 2d).
func (p *Proxy) Latency(d time.Duration) { p.set(Pass, max(d, 0)) }

// Restore switches back to [Pass] with no added latency.
func (p *Proxy) Restore() { p.set(Pass, 0) }

// Mode returns the current mode and added latency.
func (p *Proxy) Mode() (Mode, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.latency
}

// Conns returns how many proxied connections are open.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops listening, resets every connection and waits for the proxy's
// goroutines to finish. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	err := p.ln.Close()
	links := p.takeLinks()
	p.mu.Unlock()
	for _, l := range links {
		l.abort()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) set(m Mode, latency time.Duration) {
	p.mu.Lock()
	p.mode, p.latency = m, latency
	close(p.changed)
	p.changed = make(chan struct{})
	var links []*link
	if m == Reset {
		links = p.takeLinks()
	}
	p.mu.Unlock()
	for _, l := range links {
		l.abort()
	}
}

// takeLinks empties the link set and returns what it held. p.mu must be held.
func (p *Proxy) takeLinks() []*link {
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	clear(p.links)
	return links
}

// state returns the mode, latency and the channel closed at the next change.
func (p *Proxy) state() (Mode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.latency, p.changed
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select { // a transient failure (out of descriptors): back off briefly
			case <-p.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.mu.Lock()
		refuse := p.closed || p.mode == Reset || len(p.links)+p.dialing >= p.maxConns
		if !refuse {
			p.dialing++
		}
		p.mu.Unlock()
		if refuse {
			rst(c)
			continue
		}
		p.wg.Go(func() { p.dial(c) })
	}
}

// dial connects to the target for the accepted client connection c and
// starts forwarding; a target that cannot be reached resets c.
func (p *Proxy) dial(c net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	p.wg.Go(func() { // Close cuts a slow dial short
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	})
	var d net.Dialer
	s, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	p.mu.Lock()
	p.dialing--
	if err != nil || p.closed || p.mode == Reset {
		p.mu.Unlock()
		rst(c)
		if s != nil {
			rst(s)
		}
		return
	}
	l := &link{client: c, server: s, done: make(chan struct{})}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var halves sync.WaitGroup
	halves.Add(2)
	for _, dir := range [][2]net.Conn{{c, s}, {s, c}} {
		ch := make(chan chunk, chunkQueue)
		var readErr error
		p.wg.Go(func() {
			readErr = l.read(dir[0], ch)
			close(ch) // after readErr is set: the writer reads it once ch is closed
		})
		p.wg.Go(func() {
			defer halves.Done()
			p.write(l, ch, dir[1], &readErr)
		})
	}
	p.wg.Go(func() {
		halves.Wait()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
		l.close()
	})
}

type chunk struct {
	data []byte
	at   time.Time // when the proxy read it
}

// link is one proxied connection: the client's side and the target's side.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed when the link is torn down
}

// read copies src into ch until src fails or ends, and returns the error
// (nil at a clean EOF).
func (l *link) read(src net.Conn, ch chan<- chunk) error {
	for {
		buf := make([]byte, chunkSize)
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case ch <- chunk{data: buf[:n], at: time.Now()}:
			case <-l.done:
				return net.ErrClosed
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// write delivers the chunks of ch to dst as the proxy's mode allows. When ch
// ends at a clean EOF it half-closes dst; when it ends with an error, or dst
// fails, it aborts the whole link.
func (p *Proxy) write(l *link, ch <-chan chunk, dst net.Conn, readErr *error) {
	for c := range ch {
		if !p.hold(l, c.at) {
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			l.abort()
			return
		}
	}
	// ch is closed, so the reader has returned and its error is visible.
	if *readErr != nil {
		l.abort()
		return
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// hold waits until a chunk read at `at` may be delivered: not while in
// Blackhole, and not before at + latency. It returns false when the link was
// torn down meanwhile or the proxy was cut (Reset), so held bytes are dropped.
func (p *Proxy) hold(l *link, at time.Time) bool {
	for {
		mode, latency, changed := p.state()
		var t *time.Timer
		switch {
		case mode == Reset:
			return false // a cut discards what a blackhole held: none of it reaches the other side
		case mode == Blackhole:
			t = time.NewTimer(time.Hour) // until the mode changes
		case latency > 0 && time.Until(at.Add(latency)) > 0:
			t = time.NewTimer(time.Until(at.Add(latency)))
		default:
			return true
		}
		select {
		case <-l.done:
			t.Stop()
			return false
		case <-changed:
			t.Stop()
		case <-t.C:
			if mode != Blackhole {
				return true
			}
		}
	}
}

// abort resets both sides of the link.
func (l *link) abort() {
	l.once.Do(func() {
		close(l.done)
		rst(l.client)
		rst(l.server)
	})
}

// close closes both sides normally, after both directions finished.
func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// rst closes c so that the peer gets a TCP RST rather than a FIN.
func rst(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
