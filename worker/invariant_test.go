package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/clock/clocktest"
)

// The invariant of the package doc: a slot's next holder issues only
// timestamps above every timestamp an earlier holder may issue. These tests
// drive the fake ZooKeeper through the faults that break naive leases and
// check, through one log of every (worker, millisecond) issued, that no
// timestamp is issued twice.

// TestInvariantPausedHolderResumedAfterSlotTaken: holder a is cut off (a
// pause or a partition: it does not know), its session ends on the server,
// and b takes the same slot. a keeps issuing only up to its durable mark,
// b only above it; when a's queued heartbeat finally lands it is
// conditional on a's old version, fails, and a stops. The mark is never
// lowered below what b issued.
func TestInvariantPausedHolderResumedAfterSlotTaken(t *testing.T) {
	f := newFakeZK()
	log := newIssuedLog()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ha := newTestHolder("a", nil, log)
	a := register(t, fakeConfig(t, f, ha, 9000))
	go ha.issueLoop(ctx)
	sa, _ := a.Slot()
	waitFor(t, "a issuing", 5*time.Second, func() bool { return ha.snap().issued > 5 })

	ca := connOf(a)
	ca.Disconnect() // a is paused or partitioned; it does not know its session ends
	f.DropEphemerals(ca.SessionID())
	// a's durable mark: what ZooKeeper holds once a can no longer write.
	b0, _, _ := f.get(a.l.last(0, sa.Node))
	d0, err := decodeLast(b0)
	if err != nil {
		t.Fatal(err)
	}
	aMark := d0.HighWater

	hb := newTestHolder("b", nil, log)
	cfgB := fakeConfig(t, f, hb, 9001)
	if err := writeProperties(propertiesPath(cfgB.PropertiesDir, "idgen", 9001, "10.0.0.1"),
		properties{Cluster: "c1", IDC: 0, Node: sa.Node, WorkerID: sa.Worker, HighWater: 1, Exact: true}); err != nil {
		t.Fatal(err)
	}
	b := register(t, cfgB)
	sb, _ := b.Slot()
	if sb.Node != sa.Node {
		t.Fatalf("b took node %d, want a's freed node %d", sb.Node, sa.Node)
	}
	if sb.NotBefore < aMark {
		t.Fatalf("b's NotBefore %d is below a's durable mark %d", sb.NotBefore, aMark)
	}
	go hb.issueLoop(ctx)
	waitFor(t, "b issuing", 5*time.Second, func() bool { return hb.snap().issued > 5 })

	// a resumes: its late, conditional write must fail and stop it.
	ca.Reconnect()
	waitFor(t, "a fenced by its failed conditional write", 5*time.Second, func() bool {
		fenced := ha.snap().fenced
		return len(fenced) > 0 && errors.Is(fenced[0], ErrSlotTaken)
	})
	if used := log.maxBy("a", sa.Worker); used > aMark {
		t.Fatalf("a issued %d on worker %d past its durable mark %d", used, sa.Worker, aMark)
	}
	waitFor(t, "b issuing after a's late write", 5*time.Second, func() bool { return hb.snap().issued > 20 })
	b1, _, _ := f.get(a.l.last(0, sa.Node))
	d, err := decodeLast(b1)
	if err != nil || d.HighWater < hb.LastUsed() {
		t.Fatalf("mark %d (%v) below b's last used %d: a late write lowered it", d.HighWater, err, hb.LastUsed())
	}
	cancel()
	log.check(t)
	hb.checkNoProblems(t)
}

// TestInvariantStaleWriteLandsLate: a mark write of an old holder, queued
// before the slot changed hands, arrives after the new holder's write. It
// is conditional on the old version and is refused.
func TestInvariantStaleWriteLandsLate(t *testing.T) {
	f := newFakeZK()
	ha := newTestHolder("a", nil, nil)
	a := register(t, fakeConfig(t, f, ha, 9000))
	sa, _ := a.Slot()
	path := a.l.last(0, sa.Node)
	// Another holder writes the slot's mark (it took the slot meanwhile).
	other, _, _ := f.connect(nil, 0)
	_, markStat, _ := f.get(path)
	newMark := markStat.Version
	st, err := other.Set(path, toJSON(lastData{HighWater: time.Now().Add(time.Hour).UnixMilli(), Token: "b"}), newMark)
	if err != nil {
		t.Fatal(err)
	}
	// a's next write (its heartbeat) is the late one.
	if _, err := a.writeLast(sa, time.Now().UnixMilli(), false); !errors.Is(err, ErrSlotTaken) {
		t.Fatalf("late write: %v, want ErrSlotTaken", err)
	}
	_, verStat, _ := f.get(path)
	ver := verStat.Version
	if ver != st.Version {
		t.Fatalf("the late write changed the mark (version %d, want %d)", ver, st.Version)
	}
}

// TestStandaloneCrashRestartNewAddressClockBack (issue 9 item 5, issue 10):
// a standalone node crashes (its cached mark is a look-ahead), comes back
// with a new IP on the same data dir and its clock 2 s behind. It finds
// its cache despite the new address, moves to a node whose mark has passed
// (serving at once) and reissues no (worker, millisecond) of the first run.
func TestStandaloneCrashRestartNewAddressClockBack(t *testing.T) {
	dir := t.TempDir()
	clk := clocktest.New(time.Now())
	log := newIssuedLog()
	meta := Meta{CreatedMs: 1690000000000}
	h1 := newTestHolder("run1", clk, log)
	l1, err := Standalone(StandaloneConfig{IDC: -1, Node: -1, Meta: meta, Host: "10.0.0.1", Port: 1, PropertiesDir: dir,
		Clock: clk, Holder: h1, HeartbeatInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := l1.Slot()
	for range 50 {
		clk.Add(time.Millisecond)
		if !h1.issue() {
			t.Fatal("run 1 cannot issue")
		}
	}
	// Crash: no Close. The heartbeat never ran, so the cache holds the
	// look-ahead mark written at start.
	clk.Add(-2 * time.Second)
	h2 := newTestHolder("run2", clk, log)
	l2, err := Standalone(StandaloneConfig{IDC: -1, Node: -1, Meta: meta, Host: "10.0.0.2", Port: 1, PropertiesDir: dir,
		Clock: clk, Holder: h2, HeartbeatInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close(context.Background())
	s2, _ := l2.Slot()
	if s2.Node == s1.Node {
		t.Fatalf("restart took the crashed node %d again", s2.Node)
	}
	for range 50 {
		clk.Add(time.Millisecond)
		if !h2.issue() {
			t.Fatalf("run 2 on node %d cannot issue at once (NotBefore %d, now %d)", s2.Node, s2.NotBefore, clock.Millis(clk))
		}
	}
	log.check(t)

}
