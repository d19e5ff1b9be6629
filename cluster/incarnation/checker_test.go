package incarnation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster"
)

const (
	testRoot    = "/idgen"
	testCluster = "c1"
)

var errTestRefused = errors.New("session refused")

// initCluster creates the cluster as `idctl cluster init` does.
func initCluster(t *testing.T, f *fakeZK) Marker {
	t.Helper()
	c := f.client(false)
	if _, err := cluster.Init(c, testRoot, testCluster, cluster.Settings{EpochMs: 1577836800000, IDCBits: 2, NodeBits: 8}, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	m, err := Create(c, testRoot, testCluster, zk.WorldACL(zk.PermAll), time.UnixMilli(1_700_000_000_000))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type node struct {
	rec *MemRecord
	chk *Checker
}

func newNode(key string, w Witness) *node {
	rec := &MemRecord{}
	var wit Witness
	if w != nil {
		wit = w
	}
	return &node{rec: rec, chk: NewChecker(Config{Root: testRoot, Cluster: testCluster, NodeKey: key, Record: rec, Witness: wit, Refused: errTestRefused})}
}

func (n *node) check(t *testing.T, c ZK) (bool, string) {
	t.Helper()
	restored, why, err := n.chk.Check(context.Background(), c)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return restored, why
}

func (n *node) local(t *testing.T) Local {
	t.Helper()
	l, _ := n.rec.Load()
	return l
}

func restoredMs(t *testing.T, f *fakeZK) int64 {
	t.Helper()
	r, _, err := cluster.Read(f.client(false), testRoot, testCluster)
	if err != nil {
		t.Fatal(err)
	}
	return r.RestoredMs
}

func TestCheckFirstRunRecordsAndPasses(t *testing.T) {
	f := newFakeZK()
	m := initCluster(t, f)
	a := newNode("idgen:8888:10.0.0.1", nil)
	for i := 1; i <= 3; i++ {
		if restored, why := a.check(t, f.client(false)); restored {
			t.Fatalf("check %d: restored on a healthy cluster: %s", i, why)
		}
		l := a.local(t)
		if l.ID != m.ID || l.Version != int64(i) || l.PendingVersion != 0 || l.Counter != int64(i) {
			t.Fatalf("check %d: record %+v, want incarnation %s at lineage version %d, counter %d", i, l, m.ID, i, i)
		}
		if !strings.HasPrefix(l.Node, "idgen:8888:10.0.0.1-") {
			t.Fatalf("lineage node %q does not start with the node key", l.Node)
		}
	}
	if got := f.paths(LineageDir(testRoot, testCluster) + "/"); len(got) != 1 {
		t.Fatalf("lineage znodes %v, want one", got)
	}
	if restoredMs(t, f) != 0 {
		t.Fatal("a healthy cluster was marked restored")
	}
}

// Hole h: ZooKeeper restored from a copy, and a new node writes first.
// The new node learns it from the witness (its counter is above
// ZooKeeper's), the node that ran before from its lineage, and the
// cluster's meta is marked restored before either returns.
func TestCheckRestoreFromCopyFreshNodeFirst(t *testing.T) {
	f := newFakeZK()
	initCluster(t, f)
	w := &MemWitness{st: WitnessState{Bound: true}}
	a := newNode("a", w)
	if restored, _ := a.check(t, f.client(false)); restored {
		t.Fatal("first check: restored")
	}
	snap := f.snapshot() // the copy
	if restored, _ := a.check(t, f.client(false)); restored {
		t.Fatal("reconnect: restored")
	}
	if w.State().Counter != 2 {
		t.Fatalf("witness counter %d, want 2", w.State().Counter)
	}
	f.restore(snap)

	b := newNode("b", w) // a new node: no record
	restored, why := b.check(t, f.client(false))
	if !restored || !strings.Contains(why, "database recorded") {
		t.Fatalf("new node first after the restore: restored=%v why=%q, want detected through the witness", restored, why)
	}
	if restoredMs(t, f) == 0 {
		t.Fatal("the cluster's meta was not marked restored")
	}
	restored, why = a.check(t, f.client(false))
	if !restored || !strings.Contains(why, "lineage") {
		t.Fatalf("the node that ran before: restored=%v why=%q, want detected through its lineage", restored, why)
	}
	// Seen once: the next checks pass.
	for _, n := range []*node{a, b, newNode("c", w)} {
		if restored, why := n.check(t, f.client(false)); restored {
			t.Fatalf("a check after the loss was recorded: restored again: %s", why)
		}
	}
}

// Without a witness the new node cannot tell (documented); the node that
// ran before still detects the restore at its reconnect.
func TestCheckRestoreFromCopyNoWitness(t *testing.T) {
	f := newFakeZK()
	initCluster(t, f)
	a := newNode("a", nil)
	a.check(t, f.client(false))
	snap := f.snapshot()
	a.check(t, f.client(false))
	f.restore(snap)
	b := newNode("b", nil)
	if restored, _ := b.check(t, f.client(false)); restored {
		t.Fatal("the new node without a witness detected the restore: it has nothing to compare with (update the test and the notes)")
	}
	if restored, why := a.check(t, f.client(false)); !restored {
		t.Fatal("the node that ran before did not detect the restore")
	} else if !strings.Contains(why, "lineage") && !strings.Contains(why, "counter") {
		t.Fatalf("why=%q", why)
	}
}

// A node that detected a loss records it in the marker; a node whose
// lineage ZooKeeper did not lose (its session began before the copy)
// learns it from the marker's restore count.
func TestCheckLossLearnedFromAnotherNode(t *testing.T) {
	f := newFakeZK()
	initCluster(t, f)
	a, b := newNode("a", nil), newNode("b", nil)
	b.check(t, f.client(false))
	a.check(t, f.client(false))
	snap := f.snapshot()
	a.check(t, f.client(false))
	f.restore(snap)
	if restored, _ := a.check(t, f.client(false)); !restored {
		t.Fatal("a did not detect the restore")
	}
	// b restarted meanwhile: its new process holds nothing from before.
	restarted := &node{rec: b.rec, chk: NewChecker(b.chk.cfg)}
	if restored, why := restarted.check(t, f.client(false)); restored {
		t.Fatalf("b's new process: restored (%s); want a pass: it holds nothing in memory from before the loss", why)
	}
	// c ran throughout: its process learns it.
	c := newNode("c", nil)
	c.check(t, f.client(false)) // after the loss: knows count 1
	snap2 := f.snapshot()
	a.check(t, f.client(false))
	f.restore(snap2) // c's lineage and counter in it are current
	if restored, _ := a.check(t, f.client(false)); !restored {
		t.Fatal("a did not detect the second restore")
	}
	restored, why := c.check(t, f.client(false))
	if !restored || !strings.HasPrefix(why, "another node detected") {
		t.Fatalf("c: restored=%v why=%q, want learned from the marker only", restored, why)
	}
}

func TestCheckWipe(t *testing.T) {
	f := newFakeZK()
	m := initCluster(t, f)
	a := newNode("a", nil)
	a.check(t, f.client(false))
	f.wipe()
	restored, why := a.check(t, f.client(false))
	if !restored || !strings.Contains(why, "no incarnation marker") {
		t.Fatalf("after a wipe: restored=%v why=%q", restored, why)
	}
	got, _, err := ReadMarker(f.client(false), testRoot, testCluster)
	if err != nil || got.ID != m.ID {
		t.Fatalf("marker after the wipe: %+v, %v; want re-created with incarnation %s", got, err, m.ID)
	}
	// A new node without a record or witness finds no cluster: refused.
	f.wipe()
	_, _, err = newNode("b", nil).chk.Check(context.Background(), f.client(false))
	if !errors.Is(err, ErrNoCluster) || !errors.Is(err, errTestRefused) || !strings.Contains(err.Error(), "idctl cluster init --zk-auth-file") {
		t.Fatalf("new node on an empty ZooKeeper: %v, want ErrNoCluster wrapping the refusal, naming cluster init with ZooKeeper auth", err)
	}
	// With a witness that recorded the incarnation, the new node re-creates it.
	w := &MemWitness{st: WitnessState{Bound: true, ID: m.ID, Counter: 7}}
	restored, why = newNode("c", w).check(t, f.client(false))
	if !restored || !strings.Contains(why, "the database recorded") {
		t.Fatalf("new node with a witness after a wipe: restored=%v why=%q", restored, why)
	}
	if got, _, _ := ReadMarker(f.client(false), testRoot, testCluster); got.ID != m.ID || got.Counter <= 7 {
		t.Fatalf("marker %+v: want incarnation %s with a counter above the witness's 7", got, m.ID)
	}
}

func TestCheckRecreatedClusterRefused(t *testing.T) {
	f := newFakeZK()
	old := initCluster(t, f)
	w := &MemWitness{st: WitnessState{Bound: true}}
	a := newNode("a", w)
	a.check(t, f.client(false))
	f.wipe()
	initCluster(t, f) // total loss, then `idctl cluster init` again
	for _, n := range []*node{a, newNode("fresh", w)} {
		_, _, err := n.chk.Check(context.Background(), f.client(false))
		if !errors.Is(err, ErrRecreated) || !errors.Is(err, errTestRefused) {
			t.Fatalf("re-created cluster: %v, want ErrRecreated wrapping the refusal", err)
		}
		if !strings.Contains(err.Error(), old.ID) || !strings.Contains(err.Error(), "idctl cluster restore") {
			t.Fatalf("the refusal does not name the recorded incarnation and the fix: %v", err)
		}
	}
}

// A crash between the lineage znode write and its confirmation in the
// record is not a false alarm; nor is one before the znode write.
func TestCheckCrashBetweenLineageWrites(t *testing.T) {
	f := newFakeZK()
	initCluster(t, f)
	a := newNode("a", nil)
	a.check(t, f.client(false))
	// Crash after the znode write, before the confirmation: the 2nd Save
	// of this check fails.
	saves := 0
	a.rec.FailSave = func(int) error {
		saves++
		if saves == 2 {
			return errors.New("crash")
		}
		return nil
	}
	if _, _, err := a.chk.Check(context.Background(), f.client(false)); err == nil {
		t.Fatal("the check passed with its confirmation lost")
	}
	a.rec.FailSave = nil
	if l := a.local(t); l.PendingVersion != 2 || l.Version != 1 {
		t.Fatalf("record %+v: want version 1 confirmed, 2 pending", l)
	}
	if restored, why := a.check(t, f.client(false)); restored {
		t.Fatalf("crash after the lineage write: false alarm: %s", why)
	}
	// Crash after recording the pending lineage, before the znode write.
	c := f.client(false)
	a.rec.FailSave = func(n int) error { f.failWrites(c, zk.ErrConnectionClosed); return nil }
	if _, _, err := a.chk.Check(context.Background(), c); err == nil {
		t.Fatal("the check passed with its writes failing")
	}
	a.rec.FailSave = nil
	if restored, why := a.check(t, f.client(false)); restored {
		t.Fatalf("crash before the lineage write: false alarm: %s", why)
	}
}

// One lagging follower is not a restore: the check's first write goes
// through the leader, and its reads after it are current.
func TestCheckLaggingFollowerNotRestore(t *testing.T) {
	f := newFakeZK()
	initCluster(t, f)
	w := &MemWitness{st: WitnessState{Bound: true}}
	a := newNode("a", w)
	a.check(t, f.client(false))
	lag := f.client(true) // a follower still at the first check's state
	a.check(t, f.client(false))
	a.check(t, f.client(false))
	if restored, why := a.check(t, lag); restored {
		t.Fatalf("reconnect to a lagging follower counted as a restore: %s", why)
	}
	if restored, why := newNode("b", w).check(t, f.client(true)); restored {
		t.Fatalf("new node on a lagging follower counted as a restore: %s", why)
	}
	if restoredMs(t, f) != 0 {
		t.Fatal("a healthy cluster was marked restored")
	}
}

// A cluster created before markers existed gets one from its first node
// (upgrade), not counted as a loss.
func TestCheckUpgradeCreatesMarker(t *testing.T) {
	f := newFakeZK()
	c := f.client(false)
	if _, err := cluster.Init(c, testRoot, testCluster, cluster.Settings{EpochMs: 1577836800000, IDCBits: 2, NodeBits: 8}, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	a := newNode("a", &MemWitness{st: WitnessState{Bound: true}})
	if restored, why := a.check(t, c); restored {
		t.Fatalf("upgrade: restored: %s", why)
	}
	m, _, err := ReadMarker(c, testRoot, testCluster)
	if err != nil || m.ID == "" || a.local(t).ID != m.ID {
		t.Fatalf("marker %+v, %v; record %+v", m, err, a.local(t))
	}
}

// A witness bound to no cluster (or another one) has nothing to say.
func TestCheckUnboundWitnessIgnored(t *testing.T) {
	f := newFakeZK()
	initCluster(t, f)
	w := &MemWitness{st: WitnessState{Bound: false, ID: "other", Counter: 99}}
	if restored, why := newNode("a", w).check(t, f.client(false)); restored {
		t.Fatalf("unbound witness: restored: %s", why)
	}
	// An unreadable witness: a node without a record cannot tell yet.
	w2 := &MemWitness{loadErr: errors.New("connection refused")}
	if _, _, err := newNode("b", w2).chk.Check(context.Background(), f.client(false)); err == nil || errors.Is(err, errTestRefused) {
		t.Fatalf("new node, witness unreadable: %v, want a retryable error", err)
	}
}

func TestLocalKeysRoundTrip(t *testing.T) {
	l := Local{ID: "abc", CreatedMs: 5, Node: "idgen:8888:h-1234", Version: 3, Token: "t3", PendingVersion: 4, PendingToken: "t4", Counter: 9, Restores: 1}
	kv := map[string]string{}
	for _, p := range l.Keys() {
		if !IsKey(p[0]) {
			t.Fatalf("key %q is not recognised by IsKey", p[0])
		}
		kv[p[0]] = p[1]
	}
	kv["workerId"] = "7" // other keys are ignored
	got, err := ParseKeys(kv)
	if err != nil || got != l {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, l)
	}
	if got, err := ParseKeys(map[string]string{"workerId": "1"}); err != nil || got != (Local{}) {
		t.Fatalf("a file from an older idgen: %+v, %v", got, err)
	}
	if _, err := ParseKeys(map[string]string{keyID: "x", keyNode: "n", keyLineage: "nope"}); err == nil {
		t.Fatal("a malformed lineage was accepted")
	}
}

// A second restore is counted as a second loss, also when a new node sees
// it first (the marker already counted one before).
func TestCheckSecondRestoreCounted(t *testing.T) {
	f := newFakeZK()
	initCluster(t, f)
	w := &MemWitness{st: WitnessState{Bound: true}}
	a := newNode("a", w)
	for round := int64(1); round <= 2; round++ {
		a.check(t, f.client(false))
		snap := f.snapshot()
		a.check(t, f.client(false))
		f.restore(snap)
		if restored, _ := newNode(fmt.Sprint("fresh", round), w).check(t, f.client(false)); !restored {
			t.Fatalf("round %d: the new node did not detect the restore", round)
		}
		if m, _, _ := ReadMarker(f.client(false), testRoot, testCluster); m.Restores != round {
			t.Fatalf("round %d: the marker counts %d losses", round, m.Restores)
		}
		if restored, _ := a.check(t, f.client(false)); !restored {
			t.Fatalf("round %d: the old node did not detect the restore", round)
		}
	}
}

// A write after the node's last (re)connect (a slot claim) that a restore
// loses: with Touch after it, the new node that checks first sees the
// restore through the witness, and the old node through its counter.
func TestTouchCoversWritesWithinASession(t *testing.T) {
	for _, touch := range []bool{false, true} {
		f := newFakeZK()
		initCluster(t, f)
		w := &MemWitness{st: WitnessState{Bound: true}}
		a := newNode("a", w)
		a.check(t, f.client(false))
		snap := f.snapshot() // copied after a's last connect
		if touch {
			if lost, why, err := a.chk.Touch(context.Background(), f.client(false)); err != nil || lost {
				t.Fatalf("touch: lost=%v why=%q err=%v", lost, why, err)
			}
		}
		f.restore(snap)
		restoredB, _ := newNode("b", w).check(t, f.client(false))
		restoredA, why := a.check(t, f.client(false))
		if restoredB != touch || restoredA != touch {
			t.Fatalf("touch=%v: new node restored=%v, old node restored=%v (%s); want both %v", touch, restoredB, restoredA, why, touch)
		}
	}
}

// A loss a touch sees is reported once: by the touch, whose caller tells
// the guards (zksession.Session.NoteRestore), not again by the next check
// of the same process; another running node learns it at its next touch
// (its session may survive the restore: no check would tell it), once.
func TestTouchLossReportedOnce(t *testing.T) {
	f := newFakeZK()
	initCluster(t, f)
	w := NewMemWitness()
	a, b := newNode("a", w), newNode("b", w)
	a.check(t, f.client(false))
	b.check(t, f.client(false))
	snap := f.snapshot()
	if _, _, err := b.chk.Touch(context.Background(), f.client(false)); err != nil {
		t.Fatal(err)
	}
	f.restore(snap)
	lost, why, err := a.chk.Touch(context.Background(), f.client(false))
	if err != nil || !lost || !strings.Contains(why, "database recorded") {
		t.Fatalf("touch after the restore: lost=%v why=%q err=%v; want seen through the witness", lost, why, err)
	}
	// The touch's caller reported it (zksession.Session.NoteRestore): the
	// next check must not report it a second time (every guard would apply
	// the restore rule twice, the worker fence its slot again).
	for i := 0; i < 2; i++ {
		if restored, why := a.check(t, f.client(false)); restored {
			t.Fatalf("check %d after the touch that saw the loss reported it again: %s", i, why)
		}
	}
	// b (whose session may survive the restore and never reconnect) learns
	// it at its next touch, once: not at every touch, nor at its next check.
	if lost, why, err := b.chk.Touch(context.Background(), f.client(false)); err != nil || !lost || !strings.Contains(why, "another node detected") {
		t.Fatalf("b's first touch after a's detection: lost=%v why=%q err=%v; want the loss a recorded", lost, why, err)
	}
	for i := 0; i < 3; i++ {
		if lost, why, err := b.chk.Touch(context.Background(), f.client(false)); err != nil || lost {
			t.Fatalf("touch %d of b after it learned the loss: lost=%v why=%q err=%v; want quiet", i, lost, why, err)
		}
	}
	if restored, why := b.check(t, f.client(false)); restored {
		t.Fatalf("b's next check reported the loss its touch reported: %s", why)
	}
}
