package zkown

import (
	"errors"
	"github.com/idgen/idgen/clock/clocktest"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// fakeZK is an in-memory ZooKeeper for unit tests: a tree of znodes with
// versions, zxids and ephemerals, sessions the test can take down, expire
// and close, data and children watches, Multi, and hooks that run (or
// fail) an operation's caller-visible effect at a chosen point.
type fakeZK struct {
	mu      sync.Mutex
	nodes   map[string]*fakeNode
	zxid    int64
	nextSID int64
	watches map[watchKey][]chan zk.Event
	// hook runs before every operation, without the lock (it may call
	// other connections: an interleaving).
	hook func(c *fakeConn, op, p string)
	// fail, when it returns an error, makes the operation fail with it
	// (not applied).
	fail func(c *fakeConn, op, p string) error
}

type fakeNode struct {
	data []byte
	stat zk.Stat
}

type watchKey struct {
	path     string
	children bool
}

func newFakeZK() *fakeZK {
	return &fakeZK{nodes: map[string]*fakeNode{"/": {}}, nextSID: 0x100, watches: map[watchKey][]chan zk.Event{}}
}

func (f *fakeZK) setHook(h func(c *fakeConn, op, p string)) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}

func (f *fakeZK) setFail(fn func(c *fakeConn, op, p string) error) {
	f.mu.Lock()
	f.fail = fn
	f.mu.Unlock()
}

// connect opens a session.
func (f *fakeZK) connect() *fakeConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextSID++
	return &fakeConn{f: f, sid: f.nextSID}
}

// get reads a znode directly (test assertions).
func (f *fakeZK) get(p string) ([]byte, zk.Stat, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[p]
	if !ok {
		return nil, zk.Stat{}, false
	}
	return append([]byte(nil), n.data...), n.stat, true
}

// put writes a znode directly, as another client would (test setup).
func (f *fakeZK) put(p string, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[p]
	if !ok {
		panic("fakeZK.put: no znode " + p)
	}
	n.data = append([]byte(nil), data...)
	n.stat.Version++
	f.zxid++
	n.stat.Mzxid = f.zxid
	f.fire(p, false, zk.EventNodeDataChanged)
}

func (f *fakeZK) childrenOf(p string) []string {
	var out []string
	prefix := p + "/"
	for k := range f.nodes {
		if k != "/" && strings.HasPrefix(k, prefix) && !strings.Contains(k[len(prefix):], "/") {
			out = append(out, k[len(prefix):])
		}
	}
	sort.Strings(out)
	return out
}

// fire delivers and clears the watches of p of one kind (like the real
// client: the event, then the channel is closed); f.mu is held.
func (f *fakeZK) fire(p string, children bool, typ zk.EventType) {
	k := watchKey{p, children}
	for _, ch := range f.watches[k] {
		ch <- zk.Event{Type: typ, State: zk.StateHasSession, Path: p}
		close(ch)
	}
	delete(f.watches, k)
}

func (f *fakeZK) deleteLocked(p string) {
	delete(f.nodes, p)
	f.zxid++
	f.fire(p, false, zk.EventNodeDeleted)
	f.fire(path.Dir(p), true, zk.EventNodeChildrenChanged)
}

// expire ends c's session on the server (its ephemerals go) and gives c a
// new session, like the real client after StateExpired.
func (f *fakeZK) expire(c *fakeConn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expireLocked(c.sid)
	f.nextSID++
	c.sid = f.nextSID
}

func (f *fakeZK) expireLocked(sid int64) {
	var gone []string
	for p, n := range f.nodes {
		if n.stat.EphemeralOwner == sid {
			gone = append(gone, p)
		}
	}
	sort.Strings(gone)
	for _, p := range gone {
		f.deleteLocked(p)
	}
}

// fakeConn is one client session.
type fakeConn struct {
	f *fakeZK
	// guarded by f.mu
	sid    int64
	down   bool
	closed bool
}

var _ ZK = (*fakeConn)(nil)

// setDown takes the connection down (ZooKeeper unreachable) or up.
func (c *fakeConn) setDown(down bool) {
	c.f.mu.Lock()
	c.down = down
	c.f.mu.Unlock()
}

// pre runs the hooks and checks the connection; it returns with f.mu
// held when the operation may proceed.
func (c *fakeConn) pre(op, p string) error {
	f := c.f
	f.mu.Lock()
	hook, fail := f.hook, f.fail
	f.mu.Unlock()
	if hook != nil {
		hook(c, op, p)
	}
	if fail != nil {
		if err := fail(c, op, p); err != nil {
			return err
		}
	}
	f.mu.Lock()
	switch {
	case c.closed:
		f.mu.Unlock()
		return zk.ErrConnectionClosed
	case c.down:
		f.mu.Unlock()
		return zk.ErrNoServer
	}
	return nil
}

func (c *fakeConn) Create(p string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	if err := c.pre("create", p); err != nil {
		return "", err
	}
	defer c.f.mu.Unlock()
	return p, c.f.createLocked(p, data, flags, c.sid)
}

func (f *fakeZK) createLocked(p string, data []byte, flags int32, sid int64) error {
	parent := path.Dir(p)
	pn, ok := f.nodes[parent]
	if !ok {
		return zk.ErrNoNode
	}
	if pn.stat.EphemeralOwner != 0 {
		return zk.ErrNoChildrenForEphemerals
	}
	if _, ok := f.nodes[p]; ok {
		return zk.ErrNodeExists
	}
	f.zxid++
	n := &fakeNode{data: append([]byte(nil), data...), stat: zk.Stat{Czxid: f.zxid, Mzxid: f.zxid, DataLength: int32(len(data))}}
	if flags&zk.FlagEphemeral != 0 {
		n.stat.EphemeralOwner = sid
	}
	f.nodes[p] = n
	pn.stat.Cversion++
	f.fire(p, false, zk.EventNodeCreated)
	f.fire(parent, true, zk.EventNodeChildrenChanged)
	return nil
}

func (c *fakeConn) Get(p string) ([]byte, *zk.Stat, error) {
	if err := c.pre("get", p); err != nil {
		return nil, nil, err
	}
	defer c.f.mu.Unlock()
	n, ok := c.f.nodes[p]
	if !ok {
		return nil, nil, zk.ErrNoNode
	}
	st := n.stat
	return append([]byte(nil), n.data...), &st, nil
}

func (c *fakeConn) GetW(p string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	if err := c.pre("getw", p); err != nil {
		return nil, nil, nil, err
	}
	defer c.f.mu.Unlock()
	n, ok := c.f.nodes[p]
	if !ok {
		return nil, nil, nil, zk.ErrNoNode
	}
	st := n.stat
	return append([]byte(nil), n.data...), &st, c.f.watchLocked(watchKey{p, false}), nil
}

func (f *fakeZK) watchLocked(k watchKey) <-chan zk.Event {
	ch := make(chan zk.Event, 1)
	f.watches[k] = append(f.watches[k], ch)
	return ch
}

func (c *fakeConn) Set(p string, data []byte, version int32) (*zk.Stat, error) {
	if err := c.pre("set", p); err != nil {
		return nil, err
	}
	defer c.f.mu.Unlock()
	return c.f.setLocked(p, data, version)
}

func (f *fakeZK) setLocked(p string, data []byte, version int32) (*zk.Stat, error) {
	n, ok := f.nodes[p]
	if !ok {
		return nil, zk.ErrNoNode
	}
	if version >= 0 && version != n.stat.Version {
		return nil, zk.ErrBadVersion
	}
	n.data = append([]byte(nil), data...)
	n.stat.Version++
	f.zxid++
	n.stat.Mzxid = f.zxid
	n.stat.DataLength = int32(len(data))
	f.fire(p, false, zk.EventNodeDataChanged)
	st := n.stat
	return &st, nil
}

func (c *fakeConn) Children(p string) ([]string, *zk.Stat, error) {
	if err := c.pre("children", p); err != nil {
		return nil, nil, err
	}
	defer c.f.mu.Unlock()
	n, ok := c.f.nodes[p]
	if !ok {
		return nil, nil, zk.ErrNoNode
	}
	st := n.stat
	return c.f.childrenOf(p), &st, nil
}

func (c *fakeConn) ChildrenW(p string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	if err := c.pre("childrenw", p); err != nil {
		return nil, nil, nil, err
	}
	defer c.f.mu.Unlock()
	n, ok := c.f.nodes[p]
	if !ok {
		return nil, nil, nil, zk.ErrNoNode
	}
	st := n.stat
	return c.f.childrenOf(p), &st, c.f.watchLocked(watchKey{p, true}), nil
}

func (c *fakeConn) Exists(p string) (bool, *zk.Stat, error) {
	if err := c.pre("exists", p); err != nil {
		return false, nil, err
	}
	defer c.f.mu.Unlock()
	n, ok := c.f.nodes[p]
	if !ok {
		return false, &zk.Stat{}, nil
	}
	st := n.stat
	return true, &st, nil
}

func (c *fakeConn) Delete(p string, version int32) error {
	if err := c.pre("delete", p); err != nil {
		return err
	}
	defer c.f.mu.Unlock()
	return c.f.deleteChecked(p, version)
}

func (f *fakeZK) deleteChecked(p string, version int32) error {
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
	f.deleteLocked(p)
	return nil
}

// Multi checks every op first, then applies them all (Check and Set are
// what the coordinator uses).
func (c *fakeConn) Multi(ops ...any) ([]zk.MultiResponse, error) {
	if err := c.pre("multi", ""); err != nil {
		return nil, err
	}
	f := c.f
	defer f.mu.Unlock()
	res := make([]zk.MultiResponse, len(ops))
	var first error
	for i, op := range ops {
		var err error
		switch o := op.(type) {
		case *zk.CheckVersionRequest:
			if n, ok := f.nodes[o.Path]; !ok {
				err = zk.ErrNoNode
			} else if o.Version >= 0 && n.stat.Version != o.Version {
				err = zk.ErrBadVersion
			}
		case *zk.SetDataRequest:
			if n, ok := f.nodes[o.Path]; !ok {
				err = zk.ErrNoNode
			} else if o.Version >= 0 && n.stat.Version != o.Version {
				err = zk.ErrBadVersion
			}
		default:
			err = errors.New("fakeZK.Multi: unsupported op")
		}
		res[i].Error = err
		if err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return res, first
	}
	for i, op := range ops {
		if o, ok := op.(*zk.SetDataRequest); ok {
			st, err := f.setLocked(o.Path, o.Data, o.Version)
			res[i] = zk.MultiResponse{Stat: st, Error: err}
		}
	}
	return res, nil
}

// AddAuth accepts any credential (the fake has no ACLs).
func (c *fakeConn) AddAuth(string, []byte) error { return nil }

func (c *fakeConn) SessionID() int64 {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.sid
}

func (c *fakeConn) State() zk.State {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.down || c.closed {
		return zk.StateDisconnected
	}
	return zk.StateHasSession
}

// Close ends the session (its ephemerals go at once, as with a closed
// session of the real client).
func (c *fakeConn) Close() {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if !c.closed {
		c.f.expireLocked(c.sid)
		c.closed = true
	}
}

// fakeClock is the project's settable clock (clocktest.Fake).
type fakeClock = clocktest.Fake

func newFakeClock() *fakeClock { return clocktest.New(time.Unix(1_000_000, 0)) }
