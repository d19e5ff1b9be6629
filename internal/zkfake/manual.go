package zkfake

import (
	"time"

	"github.com/go-zookeeper/zk"
)

// This file holds what unit tests need beyond the simulator: a server
// driven by hand, and the controls to step one client through an exact
// sequence (a disconnect, refused handshakes, a session replaced, a
// follower that lags, an operation failed or interleaved at a chosen
// point). They were the per-package fakes of worker, ordered/zkown,
// cluster/incarnation and cluster/zksession; kept here once so the unit
// tests and the simulator exercise one ZooKeeper model.

// NewManual returns a server driven by hand: no background loop, so no
// session expires on its own and no client reconnects by itself. A client
// gets its session at Connect (if the server takes it) and later only
// through Conn.Reconnect, Conn.Renew or Server.Handshake. The zxid starts
// in epoch 0, as the unit tests' fakes it replaces did (the worker lease
// records every epoch it sees: epoch 1 from the start would be the same
// model with other numbers). Close is not needed.
func NewManual() *Server { return newServer(0) }

// Handshake makes every reachable client without a session try its
// handshake now, by the server's rules (held, refused for a newer zxid,
// resumed, or told its session expired): what the background loop does
// at each tick, for a NewManual server.
func (s *Server) Handshake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		if !c.closed && !c.has && c.reachable() {
			s.handshake(c)
		}
	}
}

// SetHoldHandshakes makes every handshake hang (hold) or answer again: a
// client without a session gets none, and is not refused either (a
// loaded server, or one still starting). Clients that have a session
// keep it. With the loop running, held clients connect at the next tick
// after the release; on a NewManual server, at Handshake.
func (s *Server) SetHoldHandshakes(hold bool) {
	s.mu.Lock()
	s.hold = hold
	s.mu.Unlock()
}

// SetNotServing makes srvr answer "not currently serving" (an election),
// without disconnecting anybody: see Stats.
func (s *Server) SetNotServing(notServing bool) {
	s.mu.Lock()
	s.notServing = notServing
	s.mu.Unlock()
}

// Conns counts the clients ever connected (a test counts a lease's
// redials by it).
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// SetHook runs h before every client operation (op is "create", "get",
// "getw", "set", "children", "childrenw", "exists", "delete", "multi" or
// "addauth"; p its path, "" for multi and addauth), without the server's
// lock: h may call other clients, to interleave them at that point. nil
// removes it.
func (s *Server) SetHook(h func(c *Conn, op, p string)) {
	s.mu.Lock()
	s.hook = h
	s.mu.Unlock()
}

// SetFail makes a client operation fail with fail's error, not applied
// (after the hook; nil error: the operation runs). nil removes it.
func (s *Server) SetFail(fail func(c *Conn, op, p string) error) {
	s.mu.Lock()
	s.fail = fail
	s.mu.Unlock()
}

// Put writes p's data directly, as another client would: the version and
// the zxid go up and the data watches fire. p must exist.
func (s *Server) Put(p string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.setLocked(p, data, -1); err != nil {
		panic("zkfake.Put " + p + ": " + err.Error())
	}
}

// DropEphemerals deletes the ephemerals of session sid while the session
// itself lives on: the server expired it, and the test decides when its
// client learns that (Conn.Renew), or lets the client's queued requests
// land first (Conn.Reconnect resumes the session: a late write of a
// paused client, which must then be refused by its own conditions).
func (s *Server) DropEphemerals(sid int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropEphemeralsLocked(sid)
}

// RestoreTree puts back snap's tree alone: the sessions and the clients
// stay as they are (nobody is disconnected or refused; the test plays
// what the clients see). The zxid is snap's, in snap's epoch (the data
// went back silently), or with newEpoch in the epoch after the current
// one (an ensemble restarted from restored data dirs after an election:
// every zxid is above the ones before, so nothing is refused).
func (s *Server) RestoreTree(snap Snapshot, newEpoch bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = copyNodes(snap.nodes)
	s.counter = snap.counter
	if newEpoch {
		s.epoch++
	} else {
		s.epoch = snap.epoch
	}
}

// WipeTree drops every znode and sets the zxid back to the start of the
// first epoch, leaving the sessions, the clients and their watches as
// they are: the test plays what the clients see (Conn.RefuseHandshakes,
// Conn.Disconnect). Wipe is the whole restart.
func (s *Server) WipeTree() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = map[string]*node{"/": {}}
	s.epoch, s.counter = s.startEpoch, 0
}

// Disconnect drops c's connection; its session lives on on the server.
// On a NewManual server c stays without a session until Reconnect; with
// the loop running it reconnects at the next tick.
func (c *Conn) Disconnect() { c.unlessClosed(c.disconnectLocked) }

// Reconnect makes c try its handshake now, by the server's rules (see
// Handshake). A client that has a session is left as it is.
func (c *Conn) Reconnect() {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !c.closed && !c.has && c.reachable() {
		s.handshake(c)
	}
}

// RefuseHandshakes plays n handshakes the server closes before a session
// (what go-zookeeper reports for a server that refuses the client's zxid
// or is electing: TCP connected, then closed), after c loses its
// connection. c stays without a session; Reconnect ends the refusals.
func (c *Conn) RefuseHandshakes(n int) {
	c.unlessClosed(func() {
		c.has = false
		c.send(zk.StateDisconnected)
		for range n {
			c.send(zk.StateConnecting)
			c.send(zk.StateConnected)
			c.send(zk.StateDisconnected)
		}
		c.refused += n
	})
}

// unlessClosed runs f with s.mu held, unless c is closed.
func (c *Conn) unlessClosed(f func()) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if !c.closed {
		f()
	}
}

// Renew ends c's session on the server and lets c handshake again, so it
// learns of the expiry and gets a new session, as the real client does
// after StateExpired. The old session's ephemerals go at once, or with
// keepEphemerals stay until the test drops them (DropEphemerals(old)): a
// restarted server expires the sessions it restored only after their
// timeout. It returns the old session id.
func (c *Conn) Renew(keepEphemerals bool) (old int64) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	old = c.sid
	if keepEphemerals {
		delete(s.sessions, old)
		if c.has {
			c.has = false
			c.send(zk.StateDisconnected)
		}
	} else {
		s.expireLocked(old)
	}
	if !c.closed && c.reachable() {
		s.handshake(c)
	}
	return old
}

// ReadFrom makes c read from snap, as a client connected to a follower
// that is that far behind, until its next write, which (through the
// leader, as a real write) brings its reads up to date.
func (c *Conn) ReadFrom(snap Snapshot) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.stale = copyNodes(snap.nodes)
}

// Closed reports whether c was closed.
func (c *Conn) Closed() bool {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.closed
}

// SetNow sets the server's clock: the ctime and mtime of znodes (what
// cluster.Now reads as ZooKeeper's time) and, with the loop running, the
// session activity it expires by. A test with a fake clock sets it first.
func (s *Server) SetNow(now func() time.Time) {
	s.mu.Lock()
	s.now = now
	s.mu.Unlock()
}
