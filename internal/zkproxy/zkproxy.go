// Package zkproxy is a TCP proxy in front of a real ZooKeeper for tests:
// block it to cut clients off (their sessions then expire on the server
// after their timeout, as when a process dies or is partitioned), unblock
// it to let them back, and expire a session on purpose with the password
// the proxy read from the server's connect response.
package zkproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy in front of a real ZooKeeper. Tests block it to
// cut a client off and unblock it to let the client back. It also reads
// each session's password from the server's connect responses, so a test
// can force a session's expiry (ExpireSession).
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	blocked   bool
	conns     []net.Conn
	passwords map[int64][]byte
}

// New starts a proxy to target (the first server of a connect string) on
// a free loopback port; it stops when the test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: strings.Split(target, ",")[0], passwords: map[int64][]byte{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.Block()
	})
	return p
}

// Addr is the proxy's address, to give clients instead of ZooKeeper's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		blocked := p.blocked
		p.mu.Unlock()
		if blocked {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() {
			_, _ = io.Copy(s, c)
			s.Close()
			c.Close()
		}()
		go func() {
			p.sniff(s, c)
			_, _ = io.Copy(c, s)
			c.Close()
			s.Close()
		}()
	}
}

// sniff forwards the server's first packet, the connect response, and
// records the session's password.
func (p *Proxy) sniff(s, c net.Conn) {
	var hdr [4]byte
	if _, err := io.ReadFull(s, hdr[:]); err != nil {
		return
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(s, body); err != nil {
		return
	}
	// protocolVersion int32, timeOut int32, sessionId int64, passwd buffer
	if len(body) >= 20 {
		sid := int64(binary.BigEndian.Uint64(body[8:16]))
		n := int(binary.BigEndian.Uint32(body[16:20]))
		if sid != 0 && len(body) >= 20+n {
			p.mu.Lock()
			p.passwords[sid] = append([]byte(nil), body[20:20+n]...)
			p.mu.Unlock()
		}
	}
	_, _ = c.Write(append(hdr[:], body...))
}

// Block cuts every proxied connection and refuses new ones, silently
// for the ZooKeeper server: the sessions behind it live on until they
// time out.
func (p *Proxy) Block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Unblock lets new connections through again.
func (p *Proxy) Unblock() {
	p.mu.Lock()
	p.blocked = false
	p.mu.Unlock()
}

// Password is session sid's password as the server sent it (nil when
// the session was not opened through this proxy).
func (p *Proxy) Password(sid int64) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.passwords[sid]
}

// ExpireSession ends session sid on the server the way Curator's
// KillSession does: a second connection attaches to the session with its
// id and password and closes it. The session's ephemeral znodes go at once
// and its original client learns it expired when it next reconnects.
func ExpireSession(addr string, sid int64, passwd []byte, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// ConnectRequest: protocolVersion int32, lastZxidSeen int64, timeOut
	// int32, sessionId int64, passwd buffer.
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, uint32(timeout.Milliseconds()))
	req = binary.BigEndian.AppendUint64(req, uint64(sid))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	if err := writePacket(c, req); err != nil {
		return err
	}
	resp, err := readPacket(c)
	if err != nil {
		return err
	}
	if len(resp) < 16 || int64(binary.BigEndian.Uint64(resp[8:16])) != sid {
		return errors.New("server did not attach the session (already expired?)")
	}
	// RequestHeader xid=1, type=closeSession(-11).
	closeReq := binary.BigEndian.AppendUint32(nil, 1)
	closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(0xFFFFFFF5))
	if err := writePacket(c, closeReq); err != nil {
		return err
	}
	if _, err := readPacket(c); err != nil {
		return fmt.Errorf("close session: %w", err)
	}
	return nil
}

func writePacket(c net.Conn, b []byte) error {
	_, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
	return err
}

func readPacket(c net.Conn) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	_, err := io.ReadFull(c, b)
	return b, err
}
