package incarnation

import (
	"maps"
	"path"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"
)

// fakeZK is a small in-memory ZooKeeper for this package's tests (the
// shared internal/zkfake of the simulator did not exist when this was
// written): persistent znodes with versions, snapshots and restores of
// the whole tree, and clients that read from a lagging follower.
type fakeZK struct {
	mu    sync.Mutex
	nodes map[string]*fakeNode
	zxid  int64
}

type fakeNode struct {
	data    []byte
	version int32
	mzxid   int64
}

func newFakeZK() *fakeZK {
	return &fakeZK{nodes: map[string]*fakeNode{"/": {}}}
}

// snapshot copies the tree, as a copy of a ZooKeeper data dir.
func (f *fakeZK) snapshot() map[string]fakeNode {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.copyLocked()
}

func (f *fakeZK) copyLocked() map[string]fakeNode {
	cp := make(map[string]fakeNode, len(f.nodes))
	for k, n := range f.nodes {
		cp[k] = fakeNode{data: append([]byte(nil), n.data...), version: n.version, mzxid: n.mzxid}
	}
	return cp
}

// restore replaces the tree by a snapshot (writes since are lost); the
// zxid keeps counting up, as it does once a new node writes in a
// restored single server (hole h: nothing is refused).
func (f *fakeZK) restore(snap map[string]fakeNode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes = map[string]*fakeNode{}
	for k, n := range snap {
		c := n
		c.data = append([]byte(nil), n.data...)
		f.nodes[k] = &c
	}
}

// wipe empties the tree.
func (f *fakeZK) wipe() { f.restore(map[string]fakeNode{"/": {}}) }

// client returns a client. lagging: its reads come from a copy of the
// tree taken now (a follower behind the leader) until its first write,
// which, as a real write through the leader does, brings it up to date.
func (f *fakeZK) client(lagging bool) *fakeConn {
	c := &fakeConn{f: f}
	if lagging {
		c.stale = f.snapshot()
	}
	return c
}

type fakeConn struct {
	f     *fakeZK
	mu    sync.Mutex
	stale map[string]fakeNode // nil: reads are current
	// failWrites makes every write fail with this error (a lost
	// connection).
	failWrites error
	writes     int
}

func (c *fakeConn) caughtUp() {
	c.mu.Lock()
	c.stale = nil
	c.mu.Unlock()
}

func (c *fakeConn) Get(p string) ([]byte, *zk.Stat, error) {
	c.mu.Lock()
	stale := c.stale
	c.mu.Unlock()
	if stale != nil {
		n, ok := stale[p]
		if !ok {
			return nil, nil, zk.ErrNoNode
		}
		return n.data, &zk.Stat{Version: n.version, Mzxid: n.mzxid}, nil
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	n, ok := c.f.nodes[p]
	if !ok {
		return nil, nil, zk.ErrNoNode
	}
	return append([]byte(nil), n.data...), &zk.Stat{Version: n.version, Mzxid: n.mzxid, Mtime: 1}, nil
}

func (c *fakeConn) Exists(p string) (bool, *zk.Stat, error) {
	_, st, err := c.Get(p)
	if err == zk.ErrNoNode {
		return false, nil, nil
	}
	return err == nil, st, err
}

func (c *fakeConn) write() error {
	c.caughtUp()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	return c.failWrites
}

func (c *fakeConn) Create(p string, data []byte, _ int32, _ []zk.ACL) (string, error) {
	if err := c.write(); err != nil {
		return "", err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.zxid++
	if _, ok := c.f.nodes[p]; ok {
		return "", zk.ErrNodeExists
	}
	if _, ok := c.f.nodes[path.Dir(p)]; !ok {
		return "", zk.ErrNoNode
	}
	c.f.nodes[p] = &fakeNode{data: append([]byte(nil), data...), mzxid: c.f.zxid}
	return p, nil
}

func (c *fakeConn) Set(p string, data []byte, version int32) (*zk.Stat, error) {
	if err := c.write(); err != nil {
		return nil, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.zxid++
	n, ok := c.f.nodes[p]
	if !ok {
		return nil, zk.ErrNoNode
	}
	if version != -1 && version != n.version {
		return nil, zk.ErrBadVersion
	}
	n.data, n.version, n.mzxid = append([]byte(nil), data...), n.version+1, c.f.zxid
	return &zk.Stat{Version: n.version, Mzxid: n.mzxid, Mtime: c.f.zxid}, nil
}

// paths lists the znodes under prefix (for assertions).
func (f *fakeZK) paths(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range maps.Keys(f.nodes) {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

var _ ZK = (*fakeConn)(nil)
