package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster/zksession"

	"github.com/idgen/idgen/clock/clocktest"
	"github.com/idgen/idgen/cluster"
)

// Issue 17: production ZooKeeper (ensembles, elections, restores) and
// explicit cluster creation, driven with the fake ZooKeeper.

// TestNoClusterRefusesNamingInit: a node never creates a cluster; one
// that finds none and was never a member refuses, naming the command.
func TestNoClusterRefusesNamingInit(t *testing.T) {
	f := newFakeZK()
	f.setDown() // fakeConfig must not create the cluster
	cfg := fakeConfig(t, f, newTestHolder("a", nil, nil), 9000)
	f.up()
	_, err := Register(context.Background(), cfg)
	if !errors.Is(err, ErrNoCluster) || !strings.Contains(err.Error(), "idctl cluster init --zk fake:2181 --zk-root /t --cluster c1 --zk-auth-file FILE") {
		t.Fatalf("err = %v, want ErrNoCluster naming idctl cluster init", err)
	}
	if _, _, ok := f.get("/t/c1"); ok {
		t.Fatal("the refused node wrote under the cluster's path")
	}
}

// TestNewClusterServesAtOnce: a cluster created by init has never had a
// slot held, so its first nodes take unmarked slots with no wait, even
// with the default lead (a cluster created by a node waited one lead).
func TestNewClusterServesAtOnce(t *testing.T) {
	f := newFakeZK()
	for i := range 3 {
		cfg := fakeConfig(t, f, newTestHolder("a", nil, nil), 9000+i)
		cfg.OutageTolerance, cfg.HeartbeatInterval, cfg.SessionTimeout = DefaultOutageTolerance, time.Second, DefaultSessionTimeout
		l := register(t, cfg)
		if s, _ := l.Slot(); s.NotBefore > time.Now().UnixMilli() {
			t.Fatalf("node %d waits until %d in a new cluster (now %d)", i, s.NotBefore, time.Now().UnixMilli())
		}
	}
}

// TestSurvivorRestoresWipedRecord: ZooKeeper lost everything. A node that
// never ran in the cluster refuses; a node that did restores the record
// from its properties file (same created_ms, marked restored), and every
// slot taken in the next lead waits past it.
func TestSurvivorRestoresWipedRecord(t *testing.T) {
	f := newFakeZK()
	ha := newTestHolder("a", nil, nil)
	cfgA := fakeConfig(t, f, ha, 9000)
	cfgA.OutageTolerance = 2 * time.Second
	a := register(t, cfgA)
	created := a.Meta().CreatedMs
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.wipe()

	cfgNew := fakeConfig(t, f, newTestHolder("new", nil, nil), 9001)
	f.wipe() // fakeConfig created it again: wipe once more
	if _, err := Register(context.Background(), cfgNew); !errors.Is(err, ErrNoCluster) {
		t.Fatalf("a node that never ran in the cluster: err = %v, want ErrNoCluster", err)
	}

	cfgA.Holder = newTestHolder("a2", nil, nil)
	before := time.Now().UnixMilli()
	a2 := register(t, cfgA)
	if got := a2.Meta().CreatedMs; got != created {
		t.Fatalf("restored created_ms %d, want %d (the floor must not move)", got, created)
	}
	b, _, ok := f.get("/t/c1/meta")
	if !ok {
		t.Fatal("no record after the survivor started")
	}
	var rec cluster.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Restores != 1 || rec.RestoredMs < before || !rec.Init {
		t.Fatalf("record %+v, want restored once at or after %d", rec, before)
	}
	s, _ := a2.Slot()
	if want := before + cfgA.Lead().Milliseconds(); s.NotBefore < want {
		t.Fatalf("slot taken after the restore has NotBefore %d, want at least %d (one lead)", s.NotBefore, want)
	}
	if a2.Status().StateLosses != 1 {
		t.Fatalf("state losses %d, want 1", a2.Status().StateLosses)
	}
}

// TestInvariantRestoredEnsemble (issue 17 item 2): the ensemble is
// restored from a copy taken before node a claimed its slot; a, cut off
// (paused, or refused for its newer zxid), keeps issuing up to its mark. A
// new node must not take a's slot and issue under a's marks at once: the
// restored ensemble runs in a new epoch, so every slot taken within a lead
// waits past it. One slot per IDC makes the new node take a's.
func TestInvariantRestoredEnsemble(t *testing.T) {
	f := newFakeZK()
	log := newIssuedLog()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	one := Meta{IDCBits: 10, NodeBits: 0}
	ha := newTestHolder("a", nil, log)
	cfgA := fakeConfig(t, f, ha, 9000)
	f.wipe()
	initFakeWith(t, f, one.withDefaults())
	cfgA.Meta = one
	// Older than a lead plus the skew: the old rule (unmarked slots wait one
	// lead after the record's creation) no longer protects.
	time.Sleep(cfgA.Lead() + DefaultMaxPeerClockSkew + 100*time.Millisecond)
	snap := f.snapshot()

	a := register(t, cfgA)
	go ha.issueLoop(ctx)
	waitFor(t, "a issuing", 5*time.Second, func() bool { return ha.snap().issued > 5 })
	connOf(a).Disconnect()
	f.restore(snap)

	hb := newTestHolder("b", nil, log)
	cfgB := fakeConfig(t, f, hb, 9001)
	cfgB.Meta = one
	b := register(t, cfgB)
	if sa, _ := a.Slot(); func() bool { sb, _ := b.Slot(); return sb.Worker != sa.Worker }() {
		t.Fatal("setup: b did not take a's worker")
	}
	go hb.issueLoop(ctx)
	waitFor(t, "b issuing", 10*time.Second, func() bool { return hb.snap().issued > 5 })
	time.Sleep(3 * cfgA.Lead()) // a has run into its mark
	cancel()
	log.check(t)
	if s, _ := b.Slot(); s.NotBefore <= s.MarkNotBefore {
		t.Fatalf("b's slot %+v: the epoch bound did not apply", s)
	}
}

// TestOwnMarkWentBackMarksRestored: a holder whose own mark went back
// (ZooKeeper restored from a copy taken after its claim but before its
// later heartbeats) keeps its slot, and marks the cluster restored so that
// others wait.
func TestOwnMarkWentBackMarksRestored(t *testing.T) {
	f := newFakeZK()
	log := newIssuedLog()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newTestHolder("a", nil, log)
	a := register(t, fakeConfig(t, f, h, 9000))
	go h.issueLoop(ctx)
	snap := f.snapshot()
	waitFor(t, "a issuing and a few heartbeats", 5*time.Second, func() bool { return h.snap().issued > 5 && len(h.snap().extended) > 3 })
	f.RestoreTree(snap, false) // silently: same epoch, nobody disconnected
	waitFor(t, "the loss detected", 5*time.Second, func() bool { return a.Status().StateLosses >= 1 })
	b, _, _ := f.get("/t/c1/meta")
	var rec cluster.Record
	if err := json.Unmarshal(b, &rec); err != nil || rec.RestoredMs == 0 {
		t.Fatalf("record %+v (%v), want marked restored", rec, err)
	}
	n := h.snap().issued
	waitFor(t, "a still issuing", 5*time.Second, func() bool { return h.snap().issued > n+5 })
	if a.State() != StateRegistered {
		t.Fatalf("state %s", a.State())
	}
	cancel()
	log.check(t)
}

// TestElectionRefusalsKeepTheSession (issue 17 item 1): while the ensemble
// elects a leader, servers close the client's handshakes. That is no
// reason to replace the client: the session survives the election, and a
// new client would abandon it (its claim staying until it expires) and
// stop SNOWFLAKE for nothing.
func TestElectionRefusalsKeepTheSession(t *testing.T) {
	f := newFakeZK()
	h := newTestHolder("a", nil, nil)
	cfg := fakeConfig(t, f, h, 9000)
	cfg.OutageTolerance = 10 * time.Second // the election is well within it
	a := register(t, cfg)
	conns := f.Conns()
	f.SetNotServing(true)
	c := connOf(a)
	c.RefuseHandshakes(2 * zksession.RedialAfter)
	time.Sleep(2*zksession.RefusalCheckEvery + 200*time.Millisecond) // judged at least twice
	c.RefuseHandshakes(zksession.RedialAfter)
	f.SetNotServing(false)
	c.Reconnect()
	waitFor(t, "the session back", 5*time.Second, func() bool { return a.Status().ZKConnected })
	now := f.Conns()
	if now != conns {
		t.Fatalf("%d new clients during an election", now-conns)
	}
	if snap := h.snap(); len(snap.fenced) != 0 || len(snap.acquired) != 1 {
		t.Fatalf("the election interrupted the holder: fenced %v", snap.fenced)
	}
	if a.State() != StateRegistered {
		t.Fatalf("state %s", a.State())
	}
}

// TestUnreadableMarkIsSkipped (issue 17 item 5): a last/<node> that does
// not decode is skipped, logged and counted, not picked again and again.
func TestUnreadableMarkIsSkipped(t *testing.T) {
	f := newFakeZK()
	cfg := fakeConfig(t, f, newTestHolder("a", nil, nil), 9000)
	cfg.Meta = Meta{IDCBits: 8, NodeBits: 2}
	f.wipe()
	initFakeWith(t, f, cfg.Meta.withDefaults())
	c, _, _ := f.connect(nil, time.Second)
	for _, p := range []string{"/t/c1/idc-0", "/t/c1/idc-0/last"} {
		_, _ = c.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
	}
	// Slot 0's mark is garbage and the oldest: the least recently used pick.
	_, _ = c.Create("/t/c1/idc-0/last/0", []byte("{not json"), 0, zk.WorldACL(zk.PermAll))
	later := time.Now().UnixMilli() + 500
	for _, n := range []string{"1", "2", "3"} {
		_, _ = c.Create("/t/c1/idc-0/last/"+n, toJSON(lastData{HighWater: later, Exact: true}), 0, zk.WorldACL(zk.PermAll))
	}
	l := register(t, cfg)
	if s, _ := l.Slot(); s.Node == 0 {
		t.Fatal("took the slot whose mark is unreadable")
	}
	if n := l.Status().UnreadableMarks; n < 1 {
		t.Fatalf("unreadable marks counted %d, want >= 1", n)
	}
}

// TestLegacyUnmarkedWaitUsesOneClock (issue 17 item 6): in a cluster
// created by an older idgen, unmarked slots wait one lead after the
// record's creation. That time is ZooKeeper's; this node's clock runs 5 s
// ahead of it, so the wait must be converted with the measured offset, not
// compared raw (which would not wait at all).
func TestLegacyUnmarkedWaitUsesOneClock(t *testing.T) {
	f := newFakeZK()
	cfg := fakeConfig(t, f, newTestHolder("a", nil, nil), 9000)
	f.wipe()
	c, _, _ := f.connect(nil, time.Second)
	for _, p := range []string{"/t", "/t/c1"} {
		_, _ = c.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
	}
	legacy := cluster.Record{EpochMs: DefaultEpochMs, IDCBits: 2, NodeBits: 8, CreatedMs: time.Now().UnixMilli()}
	_, _ = c.Create("/t/c1/meta", toJSON(legacy), 0, zk.WorldACL(zk.PermAll))
	clk := clocktest.New(time.Now().Add(5 * time.Second))
	cfg.Clock = clk
	cfg.Holder = newTestHolder("a", clk, nil)
	cfg.MaxStartWait = time.Minute
	l := register(t, cfg)
	s, _ := l.Slot()
	want := clk.Now().UnixMilli() + (cfg.Lead() + DefaultMaxPeerClockSkew).Milliseconds() - 200
	if s.NotBefore < want {
		t.Fatalf("NotBefore %d, want at least %d: one lead after creation in this node's clock", s.NotBefore, want)
	}
}

// TestMissingMemberIsRecreated: a member znode that vanished while the
// slot is held (deleted by hand, or lost) is re-created at the next
// heartbeat, so operators and peers still find the node.
func TestMissingMemberIsRecreated(t *testing.T) {
	f := newFakeZK()
	l := register(t, fakeConfig(t, f, newTestHolder("a", nil, nil), 9000))
	old := l.Member()
	by, _, _ := f.connect(nil, time.Second) // an operator's client
	if err := by.Delete(old, -1); err != nil {
		t.Fatal(err)
	}
	by.Close()
	waitFor(t, "the member re-created", 5*time.Second, func() bool {
		m := l.Member()
		_, _, ok := f.get(m)
		return m != old && ok
	})
}
