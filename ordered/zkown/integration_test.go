package zkown

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/internal/wait"
	"github.com/idgen/idgen/ordered"
)

// These tests run against the real ZooKeeper of IDGEN_TEST_ZK (source
// .testenv after ./build.sh servers start, or ./build.sh test), each in its own cluster.

// itLease and itTimeout are long enough for a loaded 2-core CI machine:
// a renewal is bounded by a third of the lease (renewTimeout), and these
// tests assert that no node but the one they stop ever loses a shard, so a
// renewal that a busy machine delays past its bound must not fail it. With
// 600 ms (a 200 ms renewal bound) and a 500 ms operation timeout, runs
// beside other jobs (load average 15) lost shards and failed Open now and
// then.
const (
	itLease   = 1500 * time.Millisecond
	itTimeout = 2 * time.Second
)

func testZK(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("IDGEN_TEST_ZK")
	if addr == "" {
		t.Skip("IDGEN_TEST_ZK not set: source .testenv (or run ./build.sh test) for the ZooKeeper integration tests")
	}
	return addr
}

type itCluster struct {
	t       *testing.T
	servers string
	name    string
	j       *journal
}

func newITCluster(t *testing.T) *itCluster {
	servers := testZK(t)
	name := fmt.Sprintf("zkown-%s-%d", strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()), time.Now().UnixNano())
	cl := &itCluster{t: t, servers: servers, name: name, j: &journal{}}
	t.Cleanup(cl.cleanup)
	return cl
}

// plain is a client for reading back what the coordinators wrote.
func (cl *itCluster) plain() *zk.Conn {
	cl.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := cluster.Dial(ctx, strings.Split(cl.servers, ","), 10*time.Second, "", zap.NewNop())
	if err != nil {
		cl.t.Fatal(err)
	}
	return c
}

// cleanup removes the test's cluster subtree.
func (cl *itCluster) cleanup() {
	c := cl.plain()
	defer c.Close()
	var rm func(p string)
	rm = func(p string) {
		kids, _, err := c.Children(p)
		if err != nil {
			return
		}
		for _, k := range kids {
			rm(path.Join(p, k))
		}
		_ = c.Delete(p, -1)
	}
	rm("/idgen-test/" + cl.name)
}

type itNode struct {
	self   string
	c      *Coordinator
	h      *recorder
	frozen bool
}

func (cl *itCluster) open(self string) *itNode {
	cl.t.Helper()
	cfg := Config{Servers: strings.Split(cl.servers, ","), Root: "/idgen-test", Cluster: cl.name, Self: self,
		Lease: itLease, SessionTimeout: 4 * time.Second, Timeout: itTimeout, Version: "it",
		Logger: zaptest.NewLogger(cl.t, zaptest.Level(zap.WarnLevel)).Named(self)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Open(ctx, cfg)
	if err != nil {
		cl.t.Fatal(err)
	}
	n := &itNode{self: self, c: c, h: newRecorder(self, ordered.SystemClock{}, cl.j)}
	if err := c.Start(ctx, n.h); err != nil {
		cl.t.Fatal(err)
	}
	cl.t.Cleanup(func() {
		if n.frozen {
			close(c.stopAll)
			<-c.drainDone
			c.sess.Close()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return n
}

// freeze stops the node's loops without leaving: a process that stopped
// (SIGSTOP, a long pause) while its ZooKeeper session lives on.
func (n *itNode) freeze() {
	n.frozen = true
	n.c.mu.Lock()
	n.c.closed = true
	n.c.mu.Unlock()
	close(n.c.stopRound)
	<-n.c.roundDone
	close(n.c.stopRenew)
	<-n.c.renewDone
}

// converged reports nil when the nodes' handlers hold every shard,
// disjointly, each by its rendezvous owner among them, and every node's
// Owners agree.
func converged(nodes ...*itNode) error {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.self
	}
	holder := map[int]*itNode{}
	for _, n := range nodes {
		for s := range n.h.heldShards() {
			if o, ok := holder[s]; ok {
				return fmt.Errorf("shard %d held by %s and %s", s, o.self, n.self)
			}
			holder[s] = n
		}
	}
	for s := range Shards {
		h, ok := holder[s]
		if !ok {
			return fmt.Errorf("shard %d not held", s)
		}
		if want := DesiredOwner(addrs, s); h.self != want {
			return fmt.Errorf("shard %d held by %s, desired %s", s, h.self, want)
		}
		for _, n := range nodes {
			if o := n.c.Owner(s); o.Addr != h.self || o.Self != (n == h) {
				return fmt.Errorf("%s sees shard %d as %+v, held by %s", n.self, s, o, h.self)
			}
		}
	}
	return nil
}

func TestIntegrationConverge(t *testing.T) {
	cl := newITCluster(t)
	nodes := []*itNode{cl.open("127.0.0.1:17001"), cl.open("127.0.0.1:17002"), cl.open("127.0.0.1:17003")}
	wait.OK(t, 60*time.Second, "convergence", func() error { return converged(nodes...) })
	checkITEpochs(t, cl)

	// The znodes say the same, in JSON a person can read.
	c := cl.plain()
	defer c.Close()
	base := "/idgen-test/" + cl.name + "/ordered"
	kids, _, err := c.Children(base + "/nodes")
	if err != nil || len(kids) != 3 {
		t.Fatalf("nodes: %v %v", kids, err)
	}
	byID := map[string]*itNode{}
	for _, n := range nodes {
		byID[n.c.ID()] = n
		data, _, err := c.Get(base + "/nodes/" + n.c.ID())
		if err != nil {
			t.Fatal(err)
		}
		var rec nodeRecord
		if err := json.Unmarshal(data, &rec); err != nil || rec.Addr != n.self || rec.ID != n.c.ID() || rec.LeaseMs != itLease.Milliseconds() {
			t.Fatalf("node record %s: %v", data, err)
		}
	}
	for s := range Shards {
		data, _, err := c.Get(fmt.Sprintf("%s/shards/%02d", base, s))
		if err != nil {
			t.Fatal(err)
		}
		var rec shardRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatal(err)
		}
		n := byID[rec.Owner]
		if n == nil || rec.State != StateOwned || rec.Addr != n.self || n.h.heldShards()[s].Epoch != rec.Epoch {
			t.Fatalf("shard %d: %s", s, data)
		}
	}
}

// checkITEpochs: per shard, the grants' epochs grow in journal order.
func checkITEpochs(t *testing.T, cl *itCluster) {
	t.Helper()
	last := map[int]int64{}
	for _, e := range cl.j.all() {
		if e.kind != "acquire" {
			continue
		}
		if e.grant.Epoch <= last[e.shard] {
			t.Fatalf("shard %d: epoch %d after %d", e.shard, e.grant.Epoch, last[e.shard])
		}
		last[e.shard] = e.grant.Epoch
	}
}

// Closing a node hands its shards off: Release on it, Acquire on the
// others without a lease wait.
func TestIntegrationCloseHandsOff(t *testing.T) {
	cl := newITCluster(t)
	a, b, c := cl.open("127.0.0.1:17001"), cl.open("127.0.0.1:17002"), cl.open("127.0.0.1:17003")
	wait.OK(t, 60*time.Second, "convergence", func() error { return converged(a, b, c) })
	cShards := c.h.heldShards()
	mark := cl.j.len()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wait.OK(t, 60*time.Second, "hand-off", func() error { return converged(a, b) })
	evs := cl.j.since(mark)
	released := map[int]time.Time{}
	for _, e := range filter(evs, c.self, "release") {
		released[e.shard] = e.at
	}
	if len(released) != len(cShards) {
		t.Fatalf("C released %d of its %d shards", len(released), len(cShards))
	}
	for _, e := range evs {
		if e.kind == "lost" {
			t.Fatalf("shard %d lost on %s in a planned hand-off", e.shard, e.node)
		}
		if e.kind != "acquire" {
			continue
		}
		g, ok := cShards[e.shard]
		if !ok {
			t.Fatalf("%s acquired shard %d, not one of C's", e.node, e.shard)
		}
		rel := released[e.shard]
		if e.at.Before(rel) {
			t.Fatalf("shard %d acquired before C released it", e.shard)
		}
		// No lease wait: served from the takeover on.
		if e.grant.NotBefore.After(e.at) || e.grant.NotBefore.Before(rel) || e.grant.Epoch != g.Epoch+1 {
			t.Fatalf("shard %d: grant %+v at %v (released at %v, was epoch %d)", e.shard, e.grant, e.at, rel, g.Epoch)
		}
	}
	checkITEpochs(t, cl)
}

// A node whose ZooKeeper connection is closed abruptly (a crash) has its
// shards taken over only after its lease could have run out; it stops by
// itself when its lease runs out.
func TestIntegrationCrashWaitsLease(t *testing.T) {
	cl := newITCluster(t)
	a, b, c := cl.open("127.0.0.1:17001"), cl.open("127.0.0.1:17002"), cl.open("127.0.0.1:17003")
	wait.OK(t, 60*time.Second, "convergence", func() error { return converged(a, b, c) })
	cShards := c.h.heldShards()
	mark := cl.j.len()
	fails := c.c.Stats().LeaseRenewFailures
	c.c.sess.Close() // the session ends; the znode goes at once
	// Once a renewal failed, the lease no longer moves.
	wait.OK(t, 30*time.Second, "a failed renewal", func() error {
		if c.c.Stats().LeaseRenewFailures == fails {
			return errors.New("no failure yet")
		}
		return nil
	})
	cUntil := c.c.ValidUntil()
	wait.OK(t, 60*time.Second, "takeover", func() error { return converged(a, b) })
	wait.OK(t, 30*time.Second, "C dropping its shards", func() error {
		if n := len(c.h.heldShards()); n > 0 {
			return fmt.Errorf("C holds %d", n)
		}
		return nil
	})
	if !c.c.ValidUntil().Equal(cUntil) {
		t.Fatalf("C's lease moved after its connection closed: %v -> %v", cUntil, c.c.ValidUntil())
	}
	taken := 0
	for _, e := range cl.j.since(mark) {
		switch {
		case e.node == c.self && e.kind == "lost":
			if e.at.Before(cUntil) {
				t.Fatalf("C lost shard %d at %v, before its lease ran out at %v", e.shard, e.at, cUntil)
			}
		case e.kind == "acquire":
			if _, ok := cShards[e.shard]; !ok {
				t.Fatalf("%s acquired shard %d, not one of C's", e.node, e.shard)
			}
			taken++
			if !e.grant.NotBefore.After(cUntil) {
				t.Fatalf("shard %d served by %s from %v, C's lease ran until %v", e.shard, e.node, e.grant.NotBefore, cUntil)
			}
		case e.kind == "release" || e.kind == "lost":
			t.Fatalf("unexpected %s of shard %d on %s", e.kind, e.shard, e.node)
		}
	}
	if taken != len(cShards) {
		t.Fatalf("%d of C's %d shards taken", taken, len(cShards))
	}
	checkITEpochs(t, cl)
}

// A node that stops (its process paused) while its session lives on is
// taken over once it has not renewed for a Lease, after its lease.
func TestIntegrationPausedOwnerWaitsLease(t *testing.T) {
	cl := newITCluster(t)
	a, b, c := cl.open("127.0.0.1:17001"), cl.open("127.0.0.1:17002"), cl.open("127.0.0.1:17003")
	wait.OK(t, 60*time.Second, "convergence", func() error { return converged(a, b, c) })
	cShards := c.h.heldShards()
	mark := cl.j.len()
	c.freeze()
	cUntil := c.c.ValidUntil()
	wait.OK(t, 60*time.Second, "takeover", func() error { return converged(a, b) })
	taken := 0
	for _, e := range cl.j.since(mark) {
		if e.kind != "acquire" {
			t.Fatalf("unexpected %s of shard %d on %s", e.kind, e.shard, e.node)
		}
		if _, ok := cShards[e.shard]; !ok {
			t.Fatalf("%s acquired shard %d, not one of C's", e.node, e.shard)
		}
		taken++
		if !e.grant.NotBefore.After(cUntil) {
			t.Fatalf("shard %d served by %s from %v, C's lease ran until %v", e.shard, e.node, e.grant.NotBefore, cUntil)
		}
	}
	if taken != len(cShards) {
		t.Fatalf("%d of C's %d shards taken", taken, len(cShards))
	}
	// C's znode is still there (its session lives): the takeovers were
	// judged on its silence, not its absence.
	z := cl.plain()
	defer z.Close()
	if ok, _, err := z.Exists("/idgen-test/" + cl.name + "/ordered/nodes/" + c.c.ID()); err != nil || !ok {
		t.Fatalf("C's znode: %v %v", ok, err)
	}
	checkITEpochs(t, cl)
}
