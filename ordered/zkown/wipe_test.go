package zkown

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/idgen/idgen/cluster/zksession"
	"github.com/idgen/idgen/internal/wait"
	"github.com/idgen/idgen/ordered"
)

// wipeWorld is the fake ZooKeeper behind a zksession.Session: every client
// it connects gets session events, and wipe empties the tree the way a
// server restarted on an empty data dir does: the clients that saw the old
// zxids are refused their handshakes forever (connected, then closed before
// a session), and only a new client gets a session.
type wipeWorld struct {
	fz *fakeZK

	mu      sync.Mutex
	clients []*wipeClient
}

type wipeClient struct {
	*fakeConn
	events  chan zk.Event
	refused chan struct{} // closed by wipe: refused from then on
	stop    chan struct{} // closed by Close
	once    sync.Once
}

func (w *wipeWorld) connect(servers []string, timeout time.Duration) (zksession.ZK, <-chan zk.Event, error) {
	c := &wipeClient{fakeConn: w.fz.connect(), events: make(chan zk.Event, 64), refused: make(chan struct{}), stop: make(chan struct{})}
	w.mu.Lock()
	w.clients = append(w.clients, c)
	w.mu.Unlock()
	for _, st := range []zk.State{zk.StateConnecting, zk.StateConnected, zk.StateHasSession} {
		c.events <- zk.Event{Type: zk.EventSession, State: st}
	}
	go c.refuseLoop()
	return c, c.events, nil
}

// refuseLoop, once the client is refused, sends what go-zookeeper sends
// for a handshake the server closes, every 20 ms, until Close.
func (c *wipeClient) refuseLoop() {
	defer close(c.events)
	select {
	case <-c.refused:
	case <-c.stop:
		return
	}
	c.events <- zk.Event{Type: zk.EventSession, State: zk.StateDisconnected}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		for _, st := range []zk.State{zk.StateConnecting, zk.StateConnected, zk.StateDisconnected} {
			select {
			case c.events <- zk.Event{Type: zk.EventSession, State: st}:
			case <-c.stop:
				return
			}
		}
	}
}

func (c *wipeClient) Close() {
	c.once.Do(func() { close(c.stop) })
	c.fakeConn.Close()
}

// wipe empties the tree and refuses every client connected so far.
func (w *wipeWorld) wipe() {
	f := w.fz
	f.mu.Lock()
	f.nodes = map[string]*fakeNode{"/": {}}
	f.zxid = 0
	for k, chs := range f.watches {
		for _, ch := range chs {
			close(ch)
		}
		delete(f.watches, k)
	}
	f.mu.Unlock()
	w.mu.Lock()
	old := append([]*wipeClient(nil), w.clients...)
	w.mu.Unlock()
	for _, c := range old {
		c.setDown(true)
		close(c.refused)
	}
}

// stats is the srvr answer of the one fake server: serving, at its zxid.
func (w *wipeWorld) stats(servers []string, _ time.Duration) []zksession.ServerStat {
	w.fz.mu.Lock()
	defer w.fz.mu.Unlock()
	return []zksession.ServerStat{{Server: "fake:2181", Serving: true, Zxid: w.fz.zxid}}
}

// Issue 29 hole l: after a wipe, the ORDERED coordinator's client is
// refused forever ("authentication failed: EOF" second after second).
// Before the fix the coordinator dialled once and kept that client: ORDERED
// stayed down until the process restarted. On the node's session manager
// the client is replaced, the restore is detected (View.Restores), the
// layout and the node's znode are created again, and the shards are taken
// again, each serving only one lease after the detection (the restore
// rule) and above no stale lease.
//
// Negative control: IDGEN_FAULT_ORDERED_NO_RESTORE_RULE=1 (the node still
// recovers, through its znode found gone, but serves at once).
func TestWipeRefusedClientRecovers(t *testing.T) {
	t.Setenv("IDGEN_FAULT_ORDERED_NO_RESTORE_RULE", "1")
	control := faultInjectBuild
	w := &wipeWorld{fz: newFakeZK()}
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	sess, err := zksession.Open(context.Background(), zksession.Config{Servers: []string{"fake:2181"},
		Connect: w.connect, ServerStats: w.stats, SessionTimeout: 4 * time.Second, Logger: log.Named("zk")})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	const lease = 2 * time.Second
	cfg := Config{Session: sess, Root: "/idgen-test", Cluster: "wipe", Self: "127.0.0.1:17001", Lease: lease,
		Timeout: 500 * time.Millisecond, Logger: log.Named("owners"), Version: "test"}
	c, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	j := &journal{}
	h := newRecorder(cfg.Self, ordered.SystemClock{}, j)
	if err := c.Start(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	}()
	held := func() error {
		if n := len(h.heldShards()); n != Shards {
			return fmt.Errorf("%d of %d shards held", n, Shards)
		}
		return nil
	}
	wait.OK(t, 30*time.Second, "every shard held", held)
	mark := j.len()
	restores := sess.View().Restores

	w.wipe()
	wiped := time.Now()
	wait.OK(t, 30*time.Second, "the shards dropped", func() error {
		if n := len(h.heldShards()); n != 0 {
			return fmt.Errorf("%d shards still held after the wipe", n)
		}
		return nil
	})
	// Recovers: the old client stays refused, a new one takes over.
	wait.OK(t, 60*time.Second, "every shard held again after the wipe", held)
	if v := sess.View(); v.Restores == restores || v.Client < 2 {
		t.Fatalf("session after the wipe: %+v: want a new client and a restore counted", v)
	}
	early := 0
	for _, e := range j.since(mark) {
		// Granted right after the detection (the next round), the grant
		// waits about a lease; half a lease leaves room for a slow round.
		if e.kind == "acquire" && e.grant.NotBefore.Sub(e.at) < lease/2 {
			early++
			if !control {
				t.Fatalf("shard %d granted at %v after the wipe, serving from %v: the restore rule's lease wait (%v) is missing",
					e.shard, e.at, e.grant.NotBefore, lease)
			}
		}
	}
	if control && early == 0 {
		t.Fatal("negative control: every grant after the wipe still waited a lease: the switch does not reopen the hole")
	}
	if _, _, ok := w.fz.get("/idgen-test/wipe/ordered/nodes/" + c.ID()); !ok {
		t.Fatal("the node's znode was not created again")
	}
	t.Logf("recovered %v after the wipe (session replaced, restore rule applied)", time.Since(wiped).Round(time.Millisecond))
}
