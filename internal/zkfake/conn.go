package zkfake

import (
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// Conn is one client of the Server, with the method set of *zk.Conn that
// idgen uses (worker.ZK, zkown.ZK, zkguard's client: the same methods plus
// Multi). Operations fail fast with zk.ErrNoServer while the client has no
// session (the real client queues them until its own timeout: idgen bounds
// every call anyway), and block while the client is paused.
type Conn struct {
	s       *Server
	name    string
	timeout time.Duration
	events  chan zk.Event
	// guarded by s.mu
	sid          int64
	has          bool // a live session on a reachable server
	closed       bool
	eventsClosed bool
	// lastZxid is the highest zxid the client saw in an answer: a server
	// behind it refuses the client's handshake.
	lastZxid int64
	refused  int
	pending  []pendingEvent
	// frozenDisconnect: the session was cut by a pause; the client is told
	// at the thaw.
	frozenDisconnect bool
	// stale: the tree the client reads while it talks to a lagging
	// follower (ReadFrom); nil: reads are current.
	stale map[string]*node
}

type pendingEvent struct {
	ch chan zk.Event
	ev zk.Event
}

// Name is the name the client was opened with.
func (c *Conn) Name() string { return c.name }

// Refused counts the handshakes the server refused this client.
func (c *Conn) Refused() int {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.refused
}

// reachable: the client can talk to the server; s.mu is held.
func (c *Conn) reachable() bool {
	return !c.s.down && !c.s.cut[c.name] && !c.s.killed[c.name] && c.s.pausedCh[c.name] == nil && !c.closed
}

// send emits a session event; s.mu is held. A full channel drops it, like
// the real client.
func (c *Conn) send(st zk.State) {
	if c.eventsClosed {
		return
	}
	select {
	case c.events <- zk.Event{Type: zk.EventSession, State: st}:
	default:
	}
}

// disconnectLocked drops the connection (the session lives on); s.mu is
// held.
func (c *Conn) disconnectLocked() {
	c.has = false
	c.send(zk.StateDisconnected)
	c.send(zk.StateConnecting)
}

// flushPending delivers the watch events that fired while the client was
// away; s.mu is held.
func (c *Conn) flushPending() {
	for _, p := range c.pending {
		p.ch <- p.ev
		close(p.ch)
	}
	c.pending = nil
}

// dropWatches ends every watch of c (its session is gone): the real
// client delivers EventNotWatching and closes the channel; s.mu is held.
func (c *Conn) dropWatches() {
	for k, ws := range c.s.watches {
		keep := ws[:0]
		for _, w := range ws {
			if w.c == c {
				w.ch <- zk.Event{Type: zk.EventNotWatching, State: zk.StateDisconnected, Path: k.path, Err: zk.ErrSessionExpired}
				close(w.ch)
				continue
			}
			keep = append(keep, w)
		}
		if len(keep) == 0 {
			delete(c.s.watches, k)
		} else {
			c.s.watches[k] = keep
		}
	}
	for _, p := range c.pending {
		p.ch <- zk.Event{Type: zk.EventNotWatching, State: zk.StateDisconnected, Path: p.ev.Path, Err: zk.ErrSessionExpired}
		close(p.ch)
	}
	c.pending = nil
}

// begin waits out a pause, runs the test's hook and fail (Server.SetHook,
// SetFail), then checks the client; it returns with s.mu held when the
// operation op on p may run. A write brings a lagging client's reads up
// to date (ReadFrom), as a write through the leader does.
func (c *Conn) begin(op, p string) error {
	s := c.s
	hooked := false
	for {
		s.mu.Lock()
		if ch := s.pausedCh[c.name]; ch != nil {
			s.mu.Unlock()
			<-ch
			continue
		}
		if writes[op] {
			c.stale = nil
		}
		if !hooked && (s.hook != nil || s.fail != nil) {
			hook, fail := s.hook, s.fail
			s.mu.Unlock()
			hooked = true
			if hook != nil {
				hook(c, op, p)
			}
			if fail != nil {
				if err := fail(c, op, p); err != nil {
					return err
				}
			}
			continue
		}
		break
	}
	s.Ops++
	switch {
	case c.closed:
		s.mu.Unlock()
		return zk.ErrConnectionClosed
	case !c.has:
		s.mu.Unlock()
		return zk.ErrNoServer
	}
	return nil
}

// writes are the operations that go through the leader.
var writes = map[string]bool{"create": true, "set": true, "delete": true, "multi": true}

// tree is what the client reads: the lagging follower's copy, or the
// server's tree; s.mu is held.
func (c *Conn) tree() map[string]*node {
	if c.stale != nil {
		return c.stale
	}
	return c.s.nodes
}

// end records the zxid the answer carries and releases s.mu.
func (c *Conn) end() {
	c.lastZxid = max(c.lastZxid, c.s.zxidLocked())
	c.s.mu.Unlock()
}

func (c *Conn) watch(k watchKey) <-chan zk.Event {
	ch := make(chan zk.Event, 1)
	c.s.watches[k] = append(c.s.watches[k], watch{c: c, ch: ch})
	return ch
}

// Create creates p (FlagEphemeral, FlagSequence as the real server).
func (c *Conn) Create(p string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	s := c.s
	s.mu.Lock()
	lost := s.loseCreate != "" && strings.HasPrefix(p, s.loseCreate) && c.has && !c.closed && s.pausedCh[c.name] == nil
	if lost {
		s.loseCreate = ""
	}
	s.mu.Unlock()
	if err := c.begin("create", p); err != nil {
		return "", err
	}
	defer c.end()
	got, err := s.createLocked(p, data, flags, c.sid)
	if lost && err == nil {
		return "", zk.ErrConnectionClosed
	}
	return got, err
}

func (s *Server) createLocked(p string, data []byte, flags int32, sid int64) (string, error) {
	parent := path.Dir(p)
	pn, ok := s.nodes[parent]
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
	if _, ok := s.nodes[p]; ok {
		return "", zk.ErrNodeExists
	}
	now := s.now().UnixMilli()
	z := s.nextZxid()
	n := &node{data: append([]byte(nil), data...), stat: zk.Stat{Ctime: now, Mtime: now, Czxid: z, Mzxid: z, Pzxid: z, DataLength: int32(len(data))}}
	if flags&zk.FlagEphemeral != 0 {
		n.stat.EphemeralOwner = sid
	}
	s.nodes[p] = n
	pn.stat.Cversion++
	pn.stat.NumChildren++
	pn.stat.Pzxid = z
	s.fire(p, false, zk.EventNodeCreated)
	s.fire(parent, true, zk.EventNodeChildrenChanged)
	return p, nil
}

// Get reads p.
func (c *Conn) Get(p string) ([]byte, *zk.Stat, error) {
	data, st, _, err := read(c, "get", p, false, false, dataOf)
	return data, st, err
}

// GetW reads p and sets a data watch.
func (c *Conn) GetW(p string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	return read(c, "getw", p, false, true, dataOf)
}

func dataOf(tree map[string]*node, p string) []byte { return append([]byte(nil), tree[p].data...) }

// read is every read of an existing znode p (Get, GetW, Children,
// ChildrenW): op names the call for the test's hook (SetHook, SetFail),
// value takes what the call answers from the client's tree, and watched
// sets a watch on p, on its children when children. A missing p is
// zk.ErrNoNode, with no watch set.
func read[T any](c *Conn, op, p string, children, watched bool, value func(tree map[string]*node, p string) T) (T, *zk.Stat, <-chan zk.Event, error) {
	var none T
	if err := c.begin(op, p); err != nil {
		return none, nil, nil, err
	}
	defer c.end()
	tree := c.tree()
	n, ok := tree[p]
	if !ok {
		return none, nil, nil, zk.ErrNoNode
	}
	st := n.stat
	var w <-chan zk.Event
	if watched {
		w = c.watch(watchKey{p, children})
	}
	return value(tree, p), &st, w, nil
}

// Set writes p if version matches (-1: any).
func (c *Conn) Set(p string, data []byte, version int32) (*zk.Stat, error) {
	if err := c.begin("set", p); err != nil {
		return nil, err
	}
	defer c.end()
	return c.s.setLocked(p, data, version)
}

func (s *Server) setLocked(p string, data []byte, version int32) (*zk.Stat, error) {
	n, ok := s.nodes[p]
	if !ok {
		return nil, zk.ErrNoNode
	}
	if version >= 0 && version != n.stat.Version {
		return nil, zk.ErrBadVersion
	}
	n.data = append([]byte(nil), data...)
	n.stat.Version++
	n.stat.Mtime = s.now().UnixMilli()
	n.stat.Mzxid = s.nextZxid()
	n.stat.DataLength = int32(len(data))
	s.fire(p, false, zk.EventNodeDataChanged)
	st := n.stat
	return &st, nil
}

// Children lists p's children, sorted.
func (c *Conn) Children(p string) ([]string, *zk.Stat, error) {
	kids, st, _, err := read(c, "children", p, true, false, childrenIn)
	return kids, st, err
}

// ChildrenW lists p's children and sets a children watch.
func (c *Conn) ChildrenW(p string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	return read(c, "childrenw", p, true, true, childrenIn)
}

// Exists reports whether p exists.
func (c *Conn) Exists(p string) (bool, *zk.Stat, error) {
	if err := c.begin("exists", p); err != nil {
		return false, nil, err
	}
	defer c.end()
	n, ok := c.tree()[p]
	if !ok {
		return false, &zk.Stat{}, nil
	}
	st := n.stat
	return true, &st, nil
}

// Delete removes p if version matches (-1: any) and it has no children.
func (c *Conn) Delete(p string, version int32) error {
	if err := c.begin("delete", p); err != nil {
		return err
	}
	defer c.end()
	return c.s.deleteChecked(p, version)
}

func (s *Server) deleteChecked(p string, version int32) error {
	n, ok := s.nodes[p]
	if !ok {
		return zk.ErrNoNode
	}
	if version >= 0 && version != n.stat.Version {
		return zk.ErrBadVersion
	}
	if len(s.childrenOf(p)) > 0 {
		return zk.ErrNotEmpty
	}
	s.nextZxid()
	if pn, ok := s.nodes[path.Dir(p)]; ok {
		pn.stat.Cversion++
		pn.stat.NumChildren--
	}
	s.deleteLocked(p)
	return nil
}

// Multi checks every request, then applies them all or none:
// *zk.CheckVersionRequest, *zk.SetDataRequest, *zk.CreateRequest and
// *zk.DeleteRequest.
func (c *Conn) Multi(ops ...any) ([]zk.MultiResponse, error) {
	if err := c.begin("multi", ""); err != nil {
		return nil, err
	}
	defer c.end()
	s := c.s
	// Apply in place, remembering the first state of every znode an op
	// touches (nil: absent); undo it unless every op succeeded. Watches
	// fire only on success, so they are collected and fired after. (The
	// whole tree was copied before: the same result, but a cost per Multi
	// that grew with the tree.)
	u := multiUndo{s: s, prev: map[string]*node{}}
	savedCounter, savedWatches := s.counter, s.watches
	s.watches = map[watchKey][]watch{}
	res := make([]zk.MultiResponse, len(ops))
	var first error
	for i, op := range ops {
		var err error
		switch o := op.(type) {
		case *zk.CheckVersionRequest:
			if n, ok := s.nodes[o.Path]; !ok {
				err = zk.ErrNoNode
			} else if o.Version >= 0 && n.stat.Version != o.Version {
				err = zk.ErrBadVersion
			}
		case *zk.SetDataRequest:
			u.touch(o.Path)
			res[i].Stat, err = s.setLocked(o.Path, o.Data, o.Version)
		case *zk.CreateRequest:
			u.touch(path.Dir(o.Path))
			u.touch(o.Path)
			res[i].String, err = s.createLocked(o.Path, o.Data, o.Flags, c.sid)
			if err == nil {
				u.created(res[i].String) // a sequential node's own name
			}
		case *zk.DeleteRequest:
			u.touch(path.Dir(o.Path))
			u.touch(o.Path)
			err = s.deleteChecked(o.Path, o.Version)
		default:
			err = ErrUnsupported
		}
		res[i].Error = err
		if err != nil && first == nil {
			first = err
		}
	}
	s.watches = savedWatches
	if first != nil {
		u.undo()
		s.counter = savedCounter
		return res, first
	}
	// Fire the watches of what changed, comparing with the first states.
	for _, p := range u.order {
		o, n := u.prev[p], s.nodes[p]
		switch {
		case o == nil && n != nil:
			s.fire(p, false, zk.EventNodeCreated)
			s.fire(path.Dir(p), true, zk.EventNodeChildrenChanged)
		case o != nil && n != nil && o.stat.Mzxid != n.stat.Mzxid:
			s.fire(p, false, zk.EventNodeDataChanged)
		}
	}
	for _, p := range u.order {
		if u.prev[p] != nil && s.nodes[p] == nil {
			s.fire(p, false, zk.EventNodeDeleted)
			s.fire(path.Dir(p), true, zk.EventNodeChildrenChanged)
		}
	}
	return res, nil
}

// multiUndo remembers, for one Multi, the state each touched znode had
// before it (nil: absent), in the order first touched; s.mu is held.
// Nodes are copied by value: a write replaces a node's data slice and
// never changes it in place.
type multiUndo struct {
	s     *Server
	prev  map[string]*node
	order []string
}

func (u *multiUndo) touch(p string) {
	if _, ok := u.prev[p]; ok {
		return
	}
	var before *node
	if n, ok := u.s.nodes[p]; ok {
		c := *n
		before = &c
	}
	u.prev[p] = before
	u.order = append(u.order, p)
}

// created records p, just created, as absent before, unless touched
// already (a node deleted earlier in the Multi and created again).
func (u *multiUndo) created(p string) {
	if _, ok := u.prev[p]; !ok {
		u.prev[p] = nil
		u.order = append(u.order, p)
	}
}

// undo puts every touched znode back as it was.
func (u *multiUndo) undo() {
	for p, n := range u.prev {
		if n == nil {
			delete(u.s.nodes, p)
		} else {
			u.s.nodes[p] = n
		}
	}
}

// AddAuth accepts any credential (the fake has no ACLs).
func (c *Conn) AddAuth(scheme string, auth []byte) error {
	if err := c.begin("addauth", ""); err != nil {
		return err
	}
	c.end()
	return nil
}

// SessionID is the client's current session id (0 before the first).
func (c *Conn) SessionID() int64 {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.sid
}

// State is zk.StateHasSession while the client has a live session.
func (c *Conn) State() zk.State {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.has {
		return zk.StateHasSession
	}
	if c.closed {
		return zk.StateDisconnected
	}
	return zk.StateConnecting
}

// Close ends the client. Like the real client, it ends the session on the
// server only over a live connection; otherwise the session expires after
// its timeout, ephemerals and all.
func (c *Conn) Close() {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !c.closed {
		if c.has {
			s.expireLocked(c.sid)
		}
		c.dropWatches()
		c.closed, c.has = true, false
		c.send(zk.StateDisconnected)
	}
	if !c.eventsClosed {
		c.eventsClosed = true
		close(c.events)
	}
}
