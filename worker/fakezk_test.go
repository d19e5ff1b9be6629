package worker

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// fakeZK is an in-memory ZooKeeper for unit tests: a tree of znodes with
// ephemeral and sequential nodes, sessions that can be disconnected,
// expired and reconnected by the test, and data/children watches.
type fakeZK struct {
	mu      sync.Mutex
	now     func() time.Time
	nodes   map[string]*fakeNode
	nextSID int64
	down    bool // new connections get no session until up()
	conns   []*fakeConn
	watches map[watchKey][]chan zk.Event
	ops     int
	// loseCreate: the next Create of a path with this prefix is applied
	// but returns zk.ErrConnectionClosed, as when the response is lost.
	loseCreate string
	// epoch and zxid make the zxid of every write (epoch<<32 | zxid), as a
	// real ensemble's: epoch changes with each election or restart.
	epoch, zxid int64
	// notServing: the servers answer srvr "not currently serving" (an
	// election); see serverStats.
	notServing bool
	// holdSessions: new connections get no session until up(), while the
	// server serves (a handshake that hangs on a loaded server).
	holdSessions bool
}

// nextZxid returns the zxid of a new write; f.mu is held.
func (f *fakeZK) nextZxid() int64 {
	f.zxid++
	return f.epoch<<32 | f.zxid
}

// serverStats is a ServerStatsFunc: one server, serving unless down or
// electing, at the current zxid.
func (f *fakeZK) serverStats(servers []string, _ time.Duration) []ServerStat {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down || f.notServing {
		return []ServerStat{{Server: "fake:2181"}}
	}
	return []ServerStat{{Server: "fake:2181", Serving: true, Zxid: f.epoch<<32 | f.zxid}}
}

// fakeSnapshot is a copy of the tree, as a copy of a ZooKeeper data dir.
type fakeSnapshot struct {
	nodes map[string]*fakeNode
	zxid  int64
}

// snapshot copies the tree.
func (f *fakeZK) snapshot() fakeSnapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	cp := make(map[string]*fakeNode, len(f.nodes))
	for k, n := range f.nodes {
		c := *n
		c.data = append([]byte(nil), n.data...)
		cp[k] = &c
	}
	return fakeSnapshot{nodes: cp, zxid: f.zxid}
}

// restore replaces the tree by a snapshot, as an ensemble restarted from
// restored data dirs: writes since the snapshot are gone, ephemerals of
// the sessions in it are back, and the ensemble runs in a new epoch.
func (f *fakeZK) restore(snap fakeSnapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes = make(map[string]*fakeNode, len(snap.nodes))
	for k, n := range snap.nodes {
		c := *n
		c.data = append([]byte(nil), n.data...)
		f.nodes[k] = &c
	}
	f.zxid = snap.zxid
	f.epoch++
}

type fakeNode struct {
	data []byte
	stat zk.Stat
	seq  int
}

func newFakeZK(now func() time.Time) *fakeZK {
	if now == nil {
		now = time.Now
	}
	f := &fakeZK{now: now, nodes: map[string]*fakeNode{"/": {}}, nextSID: 0x1000,
		watches: map[watchKey][]chan zk.Event{}}
	return f
}

// connect is a ConnectFunc.
func (f *fakeZK) connect(servers []string, timeout time.Duration) (ZK, <-chan zk.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &fakeConn{f: f, events: make(chan zk.Event, 64)}
	f.conns = append(f.conns, c)
	if !f.down && !f.holdSessions {
		f.nextSID++
		c.sid = f.nextSID
		c.has = true
		c.send(zk.StateConnecting)
		c.send(zk.StateConnected)
		c.send(zk.StateHasSession)
	}
	return c, c.events, nil
}

// up brings the server back: connections without a session get one.
func (f *fakeZK) up() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down, f.holdSessions = false, false
	for _, c := range f.conns {
		if !c.closed && !c.has {
			f.nextSID++
			c.sid = f.nextSID
			c.has = true
			c.send(zk.StateConnected)
			c.send(zk.StateHasSession)
		}
	}
}

func (f *fakeZK) get(p string) ([]byte, zk.Stat, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[p]
	if !ok {
		return nil, zk.Stat{}, false
	}
	return append([]byte(nil), n.data...), n.stat, true
}

func (f *fakeZK) childrenOf(p string) []string {
	var out []string
	prefix := p + "/"
	if p == "/" {
		prefix = "/"
	}
	for k := range f.nodes {
		if k != "/" && strings.HasPrefix(k, prefix) && !strings.Contains(k[len(prefix):], "/") {
			out = append(out, k[len(prefix):])
		}
	}
	sort.Strings(out)
	return out
}

// fire delivers and clears the watches of p of one kind; f.mu is held.
func (f *fakeZK) fire(p string, children bool, typ zk.EventType) {
	k := watchKey{p, children}
	for _, ch := range f.watches[k] {
		ch <- zk.Event{Type: typ, State: zk.StateHasSession, Path: p}
		close(ch)
	}
	delete(f.watches, k)
}

// deleteLocked removes p; f.mu is held.
func (f *fakeZK) deleteLocked(p string) {
	delete(f.nodes, p)
	f.fire(p, false, zk.EventNodeDeleted)
	f.fire(path.Dir(p), true, zk.EventNodeChildrenChanged)
}

// expireEphemerals deletes the ephemeral znodes of sid; f.mu is held.
func (f *fakeZK) expireEphemerals(sid int64) {
	for p, n := range f.nodes {
		if n.stat.EphemeralOwner == sid {
			f.deleteLocked(p)
		}
	}
}

// fakeConn is one client session of fakeZK.
type fakeConn struct {
	f      *fakeZK
	events chan zk.Event
	// guarded by f.mu
	sid          int64
	has          bool
	closed       bool
	eventsClosed bool
}

var _ ZK = (*fakeConn)(nil)

// send emits a session event; f.mu is held. The channel is generous; a
// full one drops, like the real client.
func (c *fakeConn) send(s zk.State) {
	if c.eventsClosed {
		return
	}
	select {
	case c.events <- zk.Event{Type: zk.EventSession, State: s}:
	default:
	}
}

// disconnect drops the connection; the session lives on.
func (c *fakeConn) disconnect() {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.has = false
	c.send(zk.StateDisconnected)
	c.send(zk.StateConnecting)
}

// reconnect restores the connection within the session.
func (c *fakeConn) reconnect() {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.has = true
	c.send(zk.StateConnected)
	c.send(zk.StateHasSession)
}

// expire ends the session on the server (its ephemerals go) and, like the
// real client, reconnects with a new session.
func (c *fakeConn) expire() { c.replaceSession(false) }

// replaceSession ends the session as the client sees it and gives the
// connection a new one, like the real client after StateExpired. The old
// session's ephemerals go at once, or, with keepClaims, stay until the
// test removes them (a restarted server expires restored sessions only
// after their timeout). It returns the old session id.
func (c *fakeConn) replaceSession(keepClaims bool) (old int64) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	old = c.sid
	if !keepClaims {
		c.f.expireEphemerals(c.sid)
	}
	c.has = false
	c.send(zk.StateDisconnected)
	c.send(zk.StateExpired)
	c.send(zk.StateDisconnected)
	c.f.nextSID++
	c.sid = c.f.nextSID
	c.has = true
	c.send(zk.StateConnected)
	c.send(zk.StateHasSession)
	return old
}

// check returns the error of an operation in the current state; f.mu is
// held.
func (c *fakeConn) check(op string) error {
	c.f.ops++
	if c.closed {
		return zk.ErrConnectionClosed
	}
	if !c.has {
		return zk.ErrNoServer
	}
	return nil
}

func (c *fakeConn) Create(p string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	lost := false
	if f.loseCreate != "" && strings.HasPrefix(p, f.loseCreate) && c.has && !c.closed {
		// Applied on the server, but the response is lost.
		f.loseCreate = ""
		lost = true
	} else if err := c.check("Create"); err != nil {
		return "", err
	}
	parent := path.Dir(p)
	pn, ok := f.nodes[parent]
	if !ok {
		return "", zk.ErrNoNode
	}
	if pn.stat.EphemeralOwner != 0 {
		return "", zk.ErrNoChildrenForEphemerals
	}
	if flags&zk.FlagSequence != 0 {
		p = fmt.Sprintf("%s%010d", p, pn.seq)
		pn.seq++
	}
	if _, ok := f.nodes[p]; ok {
		return "", zk.ErrNodeExists
	}
	now := f.now().UnixMilli()
	z := f.nextZxid()
	n := &fakeNode{data: append([]byte(nil), data...), stat: zk.Stat{Ctime: now, Mtime: now, Czxid: z, Mzxid: z, DataLength: int32(len(data))}}
	if flags&zk.FlagEphemeral != 0 {
		n.stat.EphemeralOwner = c.sid
	}
	f.nodes[p] = n
	pn.stat.Cversion++
	f.fire(p, false, zk.EventNodeCreated)
	f.fire(parent, true, zk.EventNodeChildrenChanged)
	if lost {
		return "", zk.ErrConnectionClosed
	}
	return p, nil
}

func (c *fakeConn) Get(p string) ([]byte, *zk.Stat, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.check("Get"); err != nil {
		return nil, nil, err
	}
	n, ok := f.nodes[p]
	if !ok {
		return nil, nil, zk.ErrNoNode
	}
	st := n.stat
	return append([]byte(nil), n.data...), &st, nil
}

func (c *fakeConn) GetW(p string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	b, st, err := c.Get(p)
	if err != nil {
		return nil, nil, nil, err
	}
	return b, st, c.watch(watchKey{p, false}), nil
}

func (c *fakeConn) watch(k watchKey) <-chan zk.Event {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	ch := make(chan zk.Event, 1)
	c.f.watches[k] = append(c.f.watches[k], ch)
	return ch
}

func (c *fakeConn) Set(p string, data []byte, version int32) (*zk.Stat, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.check("Set"); err != nil {
		return nil, err
	}
	n, ok := f.nodes[p]
	if !ok {
		return nil, zk.ErrNoNode
	}
	if version >= 0 && version != n.stat.Version {
		return nil, zk.ErrBadVersion
	}
	n.data = append([]byte(nil), data...)
	n.stat.Version++
	n.stat.Mtime = f.now().UnixMilli()
	n.stat.Mzxid = f.nextZxid()
	n.stat.DataLength = int32(len(data))
	f.fire(p, false, zk.EventNodeDataChanged)
	st := n.stat
	return &st, nil
}

func (c *fakeConn) Children(p string) ([]string, *zk.Stat, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.check("Children"); err != nil {
		return nil, nil, err
	}
	n, ok := f.nodes[p]
	if !ok {
		return nil, nil, zk.ErrNoNode
	}
	st := n.stat
	return f.childrenOf(p), &st, nil
}

func (c *fakeConn) ChildrenW(p string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	kids, st, err := c.Children(p)
	if err != nil {
		return nil, nil, nil, err
	}
	return kids, st, c.watch(watchKey{p, true}), nil
}

func (c *fakeConn) Exists(p string) (bool, *zk.Stat, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.check("Exists"); err != nil {
		return false, nil, err
	}
	n, ok := f.nodes[p]
	if !ok {
		return false, &zk.Stat{}, nil
	}
	st := n.stat
	return true, &st, nil
}

func (c *fakeConn) Delete(p string, version int32) error {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.check("Delete"); err != nil {
		return err
	}
	n, ok := f.nodes[p]
	if !ok {
		return zk.ErrNoNode
	}
	if version >= 0 && version != n.stat.Version {
		return zk.ErrBadVersion
	}
	if len(f.childrenOf(p)) > 0 {
		return zk.ErrNotEmpty
	}
	f.nextZxid()
	f.deleteLocked(p)
	return nil
}

func (c *fakeConn) AddAuth(scheme string, auth []byte) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.check("AddAuth")
}

func (c *fakeConn) SessionID() int64 {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.sid
}

func (c *fakeConn) State() zk.State {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.has {
		return zk.StateHasSession
	}
	return zk.StateDisconnected
}

func (c *fakeConn) Close() {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if !c.closed {
		// Like the real client: closing tells the server to end the
		// session only over a live connection. A client closed without a
		// session leaves it to expire on the server, ephemerals and all
		// (the test expires it with expireEphemerals).
		if c.has {
			c.f.expireEphemerals(c.sid)
		}
		c.closed, c.has = true, false
		c.send(zk.StateDisconnected)
	}
	if !c.eventsClosed {
		c.eventsClosed = true
		close(c.events)
	}
}

// Multi is not used by the worker lease; the fake refuses it (the shared
// fake of the simulator, internal/zkfake, implements it).
func (c *fakeConn) Multi(ops ...any) ([]zk.MultiResponse, error) {
	return nil, zk.ErrAPIError
}
