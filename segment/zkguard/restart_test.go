package zkguard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/zkfake"
)

// TestRestartedProcessDoesNotHideItsPredecessor (the simulator's seed
// 1120): node a's process is killed while its member record's bound still
// runs, a new process starts under the same name, and MySQL fails over.
// The new process raises what it remembers (nothing of its predecessor's
// memory) and acknowledges. b's gate must still wait for the killed
// process's bound and then count that process gone (logged, counted,
// told to OnMembersGone): what it answered last may be lost with the
// failover, which only lossless replication protects. Before, the new
// process overwrote the record of the node's name, b opened at once and
// reported every member acknowledged. Negative control:
// IDGEN_FAULT_MEMBER_PER_NODE=1 (faultinject builds).
func TestRestartedProcessDoesNotHideItsPredecessor(t *testing.T) {
	t.Setenv("IDGEN_FAULT_MEMBER_PER_NODE", "1")
	control := faultMemberPerNode()
	zks := zkfake.New()
	t.Cleanup(zks.Close)
	db := &fakeServer{id: "server/1"}
	const lease, skew = 3 * time.Second, 100 * time.Millisecond
	var mu sync.Mutex
	var gone []Member
	edit := func(inst string) func(*Config) {
		return func(c *Config) {
			c.Self, c.Instance, c.MemberLease, c.MaxClockSkew = "a:1", inst, lease, skew
		}
	}
	a := fakeGuard(t, zks, "a:1#1", edit("1"))
	b := fakeGuard(t, zks, "b:1", func(c *Config) {
		c.MemberLease, c.MaxClockSkew = lease, skew
		c.OnMembersGone = func(m []Member) { mu.Lock(); gone = append(gone, m...); mu.Unlock() }
	})
	nop := func(context.Context) error { return nil }
	a.StartBarrier(db, Repair{Flush: nop})
	b.StartBarrier(db, Repair{Flush: nop})
	waitFor(t, "both gates open", 20*time.Second, func() bool { return open(a) && open(b) })

	zks.Kill("a:1#1") // SIGKILL: no clean leave; its record stays
	time.Sleep(100 * time.Millisecond)
	a.mu.Lock()
	aUntil := time.UnixMilli(a.selfUntilMs)
	a.mu.Unlock()
	a2 := fakeGuard(t, zks, "a:1#2", edit("2"))
	a2.StartBarrier(db, Repair{Flush: nop})
	waitFor(t, "the new process's gate open", 20*time.Second, func() bool { return open(a2) })

	db.set("server/2") // the lossy failover
	b.ServerChanged("server/1", "server/2")
	waitFor(t, "the new process acknowledged the new generation", 20*time.Second, func() bool {
		a2.mu.Lock()
		defer a2.mu.Unlock()
		return a2.acked == 2
	})
	acked := time.Now()
	waitFor(t, "b's gate open again", 20*time.Second, func() bool { return open(b) })
	opened := time.Now()
	mu.Lock()
	got := fmt.Sprint(gone)
	mu.Unlock()
	expired := b.Stats().MembersExpired
	if control {
		if !acked.Before(aUntil) {
			t.Skipf("inconclusive: the new process acknowledged at %v, after the killed one's bound %v", acked, aUntil)
		}
		if opened.After(aUntil) || expired != 0 {
			t.Fatalf("IDGEN_FAULT_MEMBER_PER_NODE=1: b opened at %v (the killed process's bound %v), %d counted gone; want the hole back: open before the bound, none counted gone",
				opened.Format(time.StampMilli), aUntil.Format(time.StampMilli), expired)
		}
		return
	}
	if opened.Before(aUntil.Add(skew)) {
		t.Fatalf("b's gate open at %v while the killed process may still serve (until %v plus the skew)", opened.Format(time.StampMilli), aUntil.Format(time.StampMilli))
	}
	if expired != 1 || got != "[a:1~1]" {
		t.Fatalf("members counted gone: %d, told %s; want 1, [a:1~1] (the killed process, not its successor)", expired, got)
	}
}

// TestLegacyMemberRecordRead: a record of the previous version, named by
// the node alone, is waited for and counted gone under that name (a
// rolling upgrade); this version's names carry the process's instance.
func TestLegacyMemberRecordRead(t *testing.T) {
	for k, want := range map[string]Member{"a:1": {Node: "a:1"}, "a:1~7f": {Node: "a:1", Instance: "7f"}} {
		if got := memberOf(k); got != want {
			t.Errorf("memberOf(%q) = %+v; want %+v", k, got, want)
		}
		if got := want.String(); got != k {
			t.Errorf("%+v prints %q; want %q", want, got, k)
		}
	}
}

// TestOpenRefusesSeparatorInNames: '/' or '~' in Self or Instance would
// name another znode, or make two processes' records ambiguous.
func TestOpenRefusesSeparatorInNames(t *testing.T) {
	for _, c := range []Config{{Self: "a/b:1"}, {Self: "a:1", Instance: "x~y"}} {
		c.Servers, c.Root, c.Cluster = []string{"127.0.0.1:1"}, "/idgen", "c"
		if g, err := Open(c); err == nil {
			g.Close()
			t.Errorf("Open(Self %q, Instance %q) accepted", c.Self, c.Instance)
		}
	}
}
