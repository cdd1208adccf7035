package pgtest

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// DeadProxy forwards TCP connections to a server until Kill: from then
// on the connections it carried go silent both ways but stay open, as
// when the peer's host vanished without a FIN or a RST (a primary lost
// in a failover, a route withdrawn), while new connections are forwarded
// as before (a new primary behind the same address). A client then learns
// of a dead connection only by its own deadlines: the kernel's TCP
// retransmission timeout is about 15 minutes.
type DeadProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	live  []*deadProxyConn
	conns []net.Conn // every socket, closed at cleanup
}

type deadProxyConn struct {
	mu   sync.Mutex
	dead bool
}

func (c *deadProxyConn) isDead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// NewDeadProxy listens on 127.0.0.1 and forwards to dbURL's host; it is
// closed, with every connection it carried, when t ends.
func NewDeadProxy(t testing.TB, dbURL string) *DeadProxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("dead proxy: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dead proxy: %v", err)
	}
	p := &DeadProxy{ln: ln, target: u.Host}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is dbURL with its host replaced by the proxy's address.
func (p *DeadProxy) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		panic(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// Kill silences every connection the proxy carries now, for good.
func (p *DeadProxy) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.live {
		c.mu.Lock()
		c.dead = true
		c.mu.Unlock()
	}
	p.live = nil
}

func (p *DeadProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		c := &deadProxyConn{}
		p.mu.Lock()
		p.live = append(p.live, c)
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		go pipe(c, server, client)
		go pipe(c, client, server)
	}
}

// pipe copies src to dst until either closes, dropping what arrives once
// c is dead (reading on, so the sender sees no back-pressure either).
func pipe(c *deadProxyConn, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.isDead() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// A live connection's end reaches the other side; a dead
			// one's never does.
			if !c.isDead() {
				dst.Close()
			}
			return
		}
	}
}

func (p *DeadProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
