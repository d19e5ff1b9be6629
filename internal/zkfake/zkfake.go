// Package zkfake is one in-memory ZooKeeper for tests and for the cluster
// simulator (package sim): a tree of znodes with versions, zxids,
// ephemerals and sequential nodes; client sessions that expire on the
// server when their client stays away longer than the session timeout;
// per-client partitions and pauses; data and children watches; Multi; and
// the operator's disasters: a wipe, a restore from an older snapshot (with
// the sessions in it), an election, and lagging followers as a client sees
// them through the srvr four-letter word.
//
// The handshake rule is the real server's: a client that saw a zxid above
// the server's last zxid is refused (go-zookeeper logs "authentication
// failed: EOF" and tries again), so a client of a wiped or restored server
// stays without a session until the server's zxid passes what it saw. That
// is the behaviour holes e, g, h and l of issue 29 are about.
//
// Timing is real time (time.Now by default): session expiry is checked by
// a background loop every few milliseconds, so a test that partitions a
// client for longer than its session timeout sees the session expire.
// The zero value is not usable; call New, and Close when done.
//
// NewManual returns the same server driven by hand, for unit tests that
// step a client through one exact sequence (manual.go): no loop, so no
// session expires and no client reconnects unless the test says so.
package zkfake

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// tick is how often the server looks for expired sessions and for refused
// clients that may connect now.
const tick = 5 * time.Millisecond

// Server is the fake ZooKeeper (one server, or an ensemble seen as one:
// what the clients observe of followers is set with SetLagging).
type Server struct {
	mu       sync.Mutex
	now      func() time.Time
	nodes    map[string]*node
	epoch    int64 // the high 32 bits of every zxid
	counter  int64 // the low 32 bits
	nextSID  int64
	sessions map[int64]*session
	conns    []*Conn
	watches  map[watchKey][]watch
	// down: the server answers nothing (no handshake, no operation).
	down bool
	// lagging: followers whose srvr answers a zxid this far behind.
	lagging []int64
	// loseCreate: the next Create under this prefix is applied but its
	// response is lost (zk.ErrConnectionClosed).
	loseCreate string
	// cut: names whose clients are partitioned; pausedCh: names whose
	// clients are frozen (closed at the thaw).
	cut      map[string]bool
	killed   map[string]bool
	pausedCh map[string]chan struct{}
	stop     chan struct{}
	stopped  sync.Once
	// Ops counts operations (tests assert a path made no call).
	Ops int
	// The hand-driven extras (manual.go); the simulator sets none of them.
	//
	// startEpoch: the epoch of a new (or wiped) server.
	startEpoch int64
	// hold: handshakes hang (no session, no refusal); notServing: srvr
	// answers "not currently serving".
	hold, notServing bool
	// hook runs before every client operation and fail may refuse it,
	// both without s.mu (they may call other clients: an interleaving).
	hook func(c *Conn, op, p string)
	fail func(c *Conn, op, p string) error
}

type node struct {
	data []byte
	stat zk.Stat
	seq  int
}

type watchKey struct {
	path     string
	children bool
}

type watch struct {
	c  *Conn
	ch chan zk.Event
}

// session is the server's side of a client session.
type session struct {
	id      int64
	timeout time.Duration
	// seen is when the server last heard from the session's client.
	seen time.Time
}

// New returns a running server with an empty tree ("/" only) in epoch 1.
func New() *Server {
	s := newServer(1)
	go s.loop()
	return s
}

func newServer(epoch int64) *Server {
	return &Server{now: time.Now, nodes: map[string]*node{"/": {}}, epoch: epoch, startEpoch: epoch, nextSID: 0x1000,
		sessions: map[int64]*session{}, watches: map[watchKey][]watch{}, stop: make(chan struct{})}
}

// Close stops the background loop. The connections stay as they are.
func (s *Server) Close() { s.stopped.Do(func() { close(s.stop) }) }

// Zxid is the server's last zxid.
func (s *Server) Zxid() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.zxidLocked()
}

func (s *Server) zxidLocked() int64 { return s.epoch<<32 | s.counter }

func (s *Server) nextZxid() int64 {
	s.counter++
	return s.zxidLocked()
}

// loop expires sessions whose client stayed away past the timeout, and
// gives sessions to clients that may have one now.
func (s *Server) loop() {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		now := s.now()
		for _, c := range s.conns {
			if c.closed {
				continue
			}
			if c.reachable() {
				if ss := s.sessions[c.sid]; ss != nil && c.has {
					ss.seen = now
				}
				if !c.has {
					s.handshake(c)
				}
			}
		}
		for id, ss := range s.sessions {
			if now.Sub(ss.seen) > ss.timeout {
				s.expireLocked(id)
			}
		}
		s.mu.Unlock()
	}
}

// handshake tries to (re)connect c; s.mu is held. A client that saw a
// newer zxid than the server's is refused; a client whose session is gone
// is told it expired and gets a new one, as go-zookeeper does.
func (s *Server) handshake(c *Conn) {
	if s.hold {
		return
	}
	if s.down || c.lastZxid > s.zxidLocked() {
		c.refused++
		return
	}
	if c.sid != 0 {
		if ss := s.sessions[c.sid]; ss != nil {
			ss.seen = s.now()
			c.has = true
			c.send(zk.StateConnected)
			c.send(zk.StateHasSession)
			c.flushPending()
			return
		}
		c.send(zk.StateExpired)
		c.dropWatches()
		c.send(zk.StateDisconnected)
	}
	s.nextSID++
	c.sid = s.nextSID
	s.sessions[c.sid] = &session{id: c.sid, timeout: c.timeout, seen: s.now()}
	c.has = true
	c.send(zk.StateConnected)
	c.send(zk.StateHasSession)
}

// Connect opens a client named name (the node it belongs to: partitions
// and pauses act on every client of a name). It returns at once; the
// session comes through the events, as with go-zookeeper.
func (s *Server) Connect(name string, sessionTimeout time.Duration) (*Conn, <-chan zk.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &Conn{s: s, name: name, timeout: sessionTimeout, events: make(chan zk.Event, 64)}
	c.send(zk.StateConnecting)
	s.conns = append(s.conns, c)
	if c.reachable() {
		s.handshake(c)
	}
	return c, c.events
}

// SetPartitioned cuts (or heals) every client of name from the server:
// their operations fail with zk.ErrNoServer and their sessions expire on
// the server after their timeout. New clients of name are cut too.
func (s *Server) SetPartitioned(name string, cut bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cut {
		s.partitioned()[name] = true
	} else {
		delete(s.partitioned(), name)
	}
	for _, c := range s.conns {
		if c.name == name && !c.closed && cut && c.has {
			c.disconnectLocked()
		}
	}
}

// Kill cuts every client of name for good, as the death of its process:
// a later SetPartitioned(name, false) does not bring them back. Their
// sessions expire on the server after their timeout.
func (s *Server) Kill(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.killed == nil {
		s.killed = map[string]bool{}
	}
	s.killed[name] = true
	for _, c := range s.conns {
		if c.name == name && !c.closed && c.has {
			c.disconnectLocked()
		}
	}
}

// SetPaused freezes (or thaws) every client of name, as a process stopped
// by SIGSTOP: operations block until the thaw, and the server hears
// nothing from the clients meanwhile, so their sessions expire after their
// timeout. Goroutines of the process that make no ZooKeeper call keep
// running: that is the difference from a real pause.
func (s *Server) SetPaused(name string, paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pausedCh == nil {
		s.pausedCh = map[string]chan struct{}{}
	}
	ch, was := s.pausedCh[name]
	switch {
	case paused && !was:
		s.pausedCh[name] = make(chan struct{})
		for _, c := range s.conns {
			if c.name == name && !c.closed && c.has {
				// The client is frozen: it notices nothing until the thaw.
				c.has = false
				c.frozenDisconnect = true
			}
		}
	case !paused && was:
		close(ch)
		delete(s.pausedCh, name)
		for _, c := range s.conns {
			if c.name == name && c.frozenDisconnect {
				c.frozenDisconnect = false
				c.send(zk.StateDisconnected)
				c.send(zk.StateConnecting)
			}
		}
	}
}

// SetDown takes the whole server down (every client disconnects, no
// handshake succeeds) or brings it back. Sessions expire meanwhile.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	if down {
		s.disconnectAll()
	}
}

func (s *Server) disconnectAll() {
	for _, c := range s.conns {
		if !c.closed && c.has {
			c.disconnectLocked()
		}
	}
}

// Elect simulates a leader election: every client is disconnected and the
// epoch goes up (the next zxid is above every earlier one, so no client is
// refused). Sessions survive.
func (s *Server) Elect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch++
	s.counter = 0
	s.disconnectAll()
}

// Snapshot is a copy of the server's data dir: the tree, the zxid and the
// sessions (with their ephemerals).
type Snapshot struct {
	nodes    map[string]*node
	epoch    int64
	counter  int64
	sessions map[int64]session
}

// Snapshot copies the server's state.
func (s *Server) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{nodes: copyNodes(s.nodes), epoch: s.epoch, counter: s.counter, sessions: map[int64]session{}}
	for id, ss := range s.sessions {
		snap.sessions[id] = *ss
	}
	return snap
}

// Restore restarts the server from snap, as an ensemble (or a single
// server) restored from an older copy: writes since the copy are gone, the
// sessions in the copy are back (with a fresh timeout, as a restarted
// server gives them), and every client reconnects, refused while it saw a
// zxid above the copy's.
func (s *Server) Restore(snap Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = copyNodes(snap.nodes)
	s.epoch, s.counter = snap.epoch, snap.counter
	s.sessions = map[int64]*session{}
	now := s.now()
	for id, ss := range snap.sessions {
		ss.seen = now
		s.sessions[id] = &ss
	}
	s.restarted()
}

// Wipe restarts the server with an empty data dir: no znode but "/", no
// session, zxid back to the start of the first epoch (1; 0 for NewManual).
func (s *Server) Wipe() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = map[string]*node{"/": {}}
	s.epoch, s.counter = s.startEpoch, 0
	s.sessions = map[int64]*session{}
	s.restarted()
}

// restarted drops every connection and every watch (the clients set them
// again after their reconnect, and a client whose session is gone gets
// EventNotWatching); s.mu is held.
func (s *Server) restarted() {
	s.disconnectAll()
	for _, c := range s.conns {
		if _, ok := s.sessions[c.sid]; !ok && c.sid != 0 {
			c.dropWatches()
		}
	}
}

// SetLagging makes the srvr answers include followers that are behind the
// leader by these many zxids each (nil: none). A client only observes them
// through Stats.
func (s *Server) SetLagging(behind []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lagging = append([]int64(nil), behind...)
}

// LoseNextCreate makes the next Create of a path under prefix apply on the
// server and lose its response (zk.ErrConnectionClosed).
func (s *Server) LoseNextCreate(prefix string) {
	s.mu.Lock()
	s.loseCreate = prefix
	s.mu.Unlock()
}

// Stat is one server's srvr answer.
type Stat struct {
	Server  string
	Serving bool
	Zxid    int64
}

// Stats answers srvr for the leader ("zk0") and each lagging follower
// ("zk1", ...). A down server (or one SetNotServing) answers nothing
// serving.
func (s *Server) Stats() []Stat {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down || s.notServing {
		return []Stat{{Server: "zk0:2181"}}
	}
	z := s.zxidLocked()
	out := []Stat{{Server: "zk0:2181", Serving: true, Zxid: z}}
	for i, b := range s.lagging {
		out = append(out, Stat{Server: fmt.Sprintf("zk%d:2181", i+1), Serving: true, Zxid: max(z-b, 0)})
	}
	return out
}

// Get reads a znode directly (assertions; no client, no zxid seen).
func (s *Server) Get(p string) ([]byte, zk.Stat, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[p]
	if !ok {
		return nil, zk.Stat{}, false
	}
	return append([]byte(nil), n.data...), n.stat, true
}

// Paths lists every znode path, sorted.
func (s *Server) Paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.nodes))
	for p := range s.nodes {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// ExpireSession ends session id on the server now (its ephemerals go).
func (s *Server) ExpireSession(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(id)
}

// ExpireClients ends the sessions of every client of name now.
func (s *Server) ExpireClients(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		if c.name == name && c.sid != 0 {
			s.expireLocked(c.sid)
		}
	}
}

func (s *Server) expireLocked(id int64) {
	if _, ok := s.sessions[id]; !ok {
		return
	}
	delete(s.sessions, id)
	s.dropEphemeralsLocked(id)
	for _, c := range s.conns {
		if c.sid == id && c.has {
			// The client is connected but the server ended the session
			// (an operator's kill, or a timeout the client did not see):
			// the client learns it at its next request or ping.
			c.has = false
			c.send(zk.StateDisconnected)
		}
	}
}

// dropEphemeralsLocked deletes the ephemerals of session id, in path
// order, one zxid each; s.mu is held.
func (s *Server) dropEphemeralsLocked(id int64) {
	var gone []string
	for p, n := range s.nodes {
		if n.stat.EphemeralOwner == id {
			gone = append(gone, p)
		}
	}
	sort.Strings(gone)
	for _, p := range gone {
		s.nextZxid()
		s.deleteLocked(p)
	}
}

func copyNodes(in map[string]*node) map[string]*node {
	out := make(map[string]*node, len(in))
	for k, n := range in {
		c := *n
		c.data = append([]byte(nil), n.data...)
		out[k] = &c
	}
	return out
}

func (s *Server) partitioned() map[string]bool {
	if s.cut == nil {
		s.cut = map[string]bool{}
	}
	return s.cut
}

func (s *Server) childrenOf(p string) []string { return childrenIn(s.nodes, p) }

// childrenIn lists the children of p in the tree nodes, sorted.
func childrenIn(nodes map[string]*node, p string) []string {
	var out []string
	prefix := p + "/"
	if p == "/" {
		prefix = "/"
	}
	for k := range nodes {
		if k != "/" && strings.HasPrefix(k, prefix) && !strings.Contains(k[len(prefix):], "/") {
			out = append(out, k[len(prefix):])
		}
	}
	sort.Strings(out)
	return out
}

// fire delivers and clears the watches of p of one kind (the event, then
// the channel is closed, as the real client does); s.mu is held. A client
// that is disconnected gets it when it reconnects.
func (s *Server) fire(p string, children bool, typ zk.EventType) {
	k := watchKey{p, children}
	for _, w := range s.watches[k] {
		ev := zk.Event{Type: typ, State: zk.StateHasSession, Path: p}
		if w.c.has {
			w.ch <- ev
			close(w.ch)
		} else {
			w.c.pending = append(w.c.pending, pendingEvent{w.ch, ev})
		}
	}
	delete(s.watches, k)
}

func (s *Server) deleteLocked(p string) {
	delete(s.nodes, p)
	s.fire(p, false, zk.EventNodeDeleted)
	s.fire(path.Dir(p), true, zk.EventNodeChildrenChanged)
}

// ErrUnsupported is Multi's answer to a request type it does not know.
var ErrUnsupported = errors.New("zkfake: unsupported Multi request")
