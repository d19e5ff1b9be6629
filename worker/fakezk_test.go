package worker

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/internal/zkfake"
)

// fakeZK is the shared in-memory ZooKeeper (internal/zkfake), driven by
// hand: a tree of znodes with ephemeral and sequential nodes, sessions
// that the test disconnects, expires and reconnects (Conn.Disconnect,
// Reconnect, Renew, RefuseHandshakes), and data/children watches.
type fakeZK struct {
	*zkfake.Server
	// down: see setDown.
	down atomic.Bool
}

// fakeConn is one client of fakeZK.
type fakeConn = zkfake.Conn

var _ ZK = (*fakeConn)(nil)

func newFakeZK() *fakeZK { return &fakeZK{Server: zkfake.NewManual()} }

// connect is a ConnectFunc; each client under a name of its own.
func (f *fakeZK) connect(servers []string, timeout time.Duration) (ZK, <-chan zk.Event, error) {
	c, ev := f.Connect(fmt.Sprintf("client%d", f.Conns()), timeout)
	return c, ev, nil
}

// serverStats is a ServerStatsFunc: the fake's srvr answers.
func (f *fakeZK) serverStats(servers []string, _ time.Duration) []ServerStat {
	var out []ServerStat
	for _, s := range f.Stats() {
		out = append(out, ServerStat{Server: s.Server, Serving: s.Serving, Zxid: s.Zxid})
	}
	return out
}

// setDown takes ZooKeeper down for new sessions: a client without one
// gets none (its handshakes hang) and srvr answers not serving. Clients
// that have a session keep it. up ends it.
func (f *fakeZK) setDown() {
	f.down.Store(true)
	f.SetHoldHandshakes(true)
	f.SetNotServing(true)
}

// up brings the server back: clients without a session try their
// handshake (and get one).
func (f *fakeZK) up() {
	f.down.Store(false)
	f.SetHoldHandshakes(false)
	f.SetNotServing(false)
	f.Handshake()
}

// get reads a znode directly (assertions).
func (f *fakeZK) get(p string) ([]byte, zk.Stat, bool) { return f.Get(p) }

// childrenOf lists p's children (assertions).
func (f *fakeZK) childrenOf(p string) []string {
	var out []string
	for _, q := range f.Paths() {
		if rest, ok := strings.CutPrefix(q, p+"/"); ok && !strings.Contains(rest, "/") {
			out = append(out, rest)
		}
	}
	return out
}

// snapshot copies the server's data dir; restore puts its tree back as an
// ensemble restarted from restored data dirs: writes since the snapshot
// are gone, ephemerals of the sessions in it are back, the ensemble runs
// in a new epoch, and the clients are left as they are.
func (f *fakeZK) snapshot() zkfake.Snapshot    { return f.Snapshot() }
func (f *fakeZK) restore(snap zkfake.Snapshot) { f.RestoreTree(snap, true) }

// wipe drops every znode, as a ZooKeeper restarted with an empty data dir
// (a server on an empty data dir starts over: zxid 0); the test plays
// what the clients see.
func (f *fakeZK) wipe() { f.WipeTree() }
