package harness

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections from a loopback port to one ZooKeeper
// server (the single server, or one server of an ensemble). It can
// partition (stop forwarding in both directions while keeping every socket
// open, as a silent network partition does) and lose the reply to the next
// create request on a slot znode (the request reaches the server and is
// applied; its reply never reaches the client, whose connection then
// breaks). It parses ZooKeeper's length-prefixed frames for the latter.
type Proxy struct {
	Addr   string
	target string
	ln     net.Listener

	mu       sync.Mutex
	cond     *sync.Cond
	blocked  bool
	conns    map[*proxyConn]bool
	loseNext bool // lose the reply to the next create on a /slots/ path

	Lost atomic.Int64 // replies lost

	raw atomic.Bool // forward bytes without ZooKeeper framing (NewTCPProxy)
}

type proxyConn struct {
	client, server net.Conn
	dead           atomic.Bool
	mu             sync.Mutex
	dropXid        int32
	armed          bool
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[*proxyConn]bool{}}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	return p, nil
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	pc := &proxyConn{client: c}
	p.mu.Lock()
	p.conns[pc] = true
	for p.blocked && !pc.dead.Load() { // partitioned: the connection hangs
		p.cond.Wait()
	}
	p.mu.Unlock()
	if pc.dead.Load() {
		return
	}
	s, err := net.DialTimeout("tcp", p.Target(), 2*time.Second)
	if err != nil {
		p.drop(pc)
		return
	}
	p.mu.Lock()
	pc.server = s
	p.mu.Unlock()
	if pc.dead.Load() {
		s.Close()
		return
	}
	if p.raw.Load() {
		go p.pipeRaw(pc, c, s)
		p.pipeRaw(pc, s, c)
		return
	}
	go p.pipe(pc, c, s, true)
	p.pipe(pc, s, c, false)
}

func (p *Proxy) drop(pc *proxyConn) {
	pc.dead.Store(true)
	pc.client.Close()
	p.mu.Lock()
	server := pc.server
	delete(p.conns, pc)
	p.cond.Broadcast()
	p.mu.Unlock()
	if server != nil {
		server.Close()
	}
}

// Active returns how many connections are forwarded to the target now
// (connected through to it and not closed). A ZooKeeper client holds one
// connection at a time, so a node whose session runs through this proxy
// shows 1 or more here.
func (p *Proxy) Active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for pc := range p.conns {
		if pc.server != nil && !pc.dead.Load() {
			n++
		}
	}
	return n
}

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// SwitchTarget points new connections at addr and closes every existing
// connection at once, as a virtual IP moved to another server does: the
// clients see their connections break and reconnect to addr.
func (p *Proxy) SwitchTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	old := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		old = append(old, pc)
	}
	p.mu.Unlock()
	for _, pc := range old {
		p.drop(pc)
	}
}

// gate blocks while the proxy is partitioned; false: the connection died.
func (p *Proxy) gate(pc *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.blocked && !pc.dead.Load() {
		p.cond.Wait()
	}
	return !pc.dead.Load()
}

// pipe copies frames from src to dst. toServer: client to server.
func (p *Proxy) pipe(pc *proxyConn, src, dst net.Conn, toServer bool) {
	defer p.drop(pc)
	first := true
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(src, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > 64<<20 {
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(src, body); err != nil {
			return
		}
		if !p.gate(pc) {
			return
		}
		if !first && len(body) >= 8 {
			xid := int32(binary.BigEndian.Uint32(body[:4]))
			if toServer {
				op := int32(binary.BigEndian.Uint32(body[4:8]))
				// create, create2, multi, createContainer, createTTL
				if op == 1 || op == 15 || op == 14 || op == 19 || op == 21 {
					p.mu.Lock()
					if p.loseNext && bytes.Contains(body, []byte("/slots/")) {
						p.loseNext = false
						pc.mu.Lock()
						pc.dropXid, pc.armed = xid, true
						pc.mu.Unlock()
					}
					p.mu.Unlock()
				}
			} else {
				pc.mu.Lock()
				lose := pc.armed && xid == pc.dropXid
				pc.mu.Unlock()
				if lose {
					// The server applied the create; the client never hears.
					p.Lost.Add(1)
					return
				}
			}
		}
		first = false
		if _, err := dst.Write(append(hdr[:], body...)); err != nil {
			return
		}
	}
}

// Partition stops forwarding; sockets stay open.
func (p *Proxy) Partition() {
	p.mu.Lock()
	p.blocked = true
	p.mu.Unlock()
}

// Heal closes every connection held during the partition (as the peers'
// TCP stacks eventually do) and forwards new ones again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	var old []*proxyConn
	for pc := range p.conns {
		old = append(old, pc)
	}
	p.blocked = false
	p.mu.Unlock()
	for _, pc := range old {
		p.drop(pc)
	}
}

// LoseNextSlotCreateReply arms the proxy: the reply to the next create of a
// /slots/ znode is dropped and that connection closed.
func (p *Proxy) LoseNextSlotCreateReply() {
	p.mu.Lock()
	p.loseNext = true
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Heal()
}
