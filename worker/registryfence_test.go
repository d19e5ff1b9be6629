package worker

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster"
)

// markAfterClaim is a ZooKeeper client that, once armed, lets a
// migration mark the cluster's record right after the next slot claim
// reached the server: the interleaving the read after the claim exists
// for.
type markAfterClaim struct {
	ZK
	f     *fakeZK
	armed *atomic.Bool
	fired *atomic.Bool
}

func (c *markAfterClaim) Create(p string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	got, err := c.ZK.Create(p, data, flags, acl)
	if err == nil && strings.Contains(p, "/slots/") && c.armed.CompareAndSwap(true, false) {
		other, _, _ := c.f.connect(nil, time.Second)
		defer other.Close()
		if _, serr := cluster.SetRegistry(other, "/t", "c1", "migrating"); serr == nil {
			c.fired.Store(true)
		}
	}
	return got, err
}

// Issue 29, hole m, the race: a node whose session expired re-claims
// while `idctl cluster migrate` starts. Its re-claim read the cluster
// record (still zookeeper), then claimed a slot; the migration marked the
// record migrating right after that claim and, looking for held slots
// before it, could have missed it. The node reads the record again after
// claiming: it must give the slot back and not serve.
func TestReclaimRefusedWhenRecordMarkedAfterClaim(t *testing.T) {
	f := newFakeZK()
	h := newTestHolder("a", nil, nil)
	cfg := fakeConfig(t, f, h, 9000)
	var armed, fired atomic.Bool
	var last atomic.Pointer[fakeConn] // the lease's current client
	cfg.Connect = func(servers []string, timeout time.Duration) (ZK, <-chan zk.Event, error) {
		c, ev, err := f.connect(servers, timeout)
		if err != nil {
			return c, ev, err
		}
		last.Store(c.(*fakeConn))
		return &markAfterClaim{ZK: c, f: f, armed: &armed, fired: &fired}, ev, nil
	}
	l := register(t, cfg)
	if n := len(h.snap().acquired); n != 1 {
		t.Fatalf("acquired %d slots at start; want 1", n)
	}
	armed.Store(true)
	last.Load().Renew(false)
	slotsHeld := func() int { return len(f.childrenOf(l.l.slots(0))) }
	waitFor(t, "the re-claim refused (slot given back) or a slot re-acquired", 5*time.Second, func() bool {
		return fired.Load() && slotsHeld() == 0 || len(h.snap().acquired) > 1
	})
	snap := h.snap()
	if len(snap.acquired) > 1 {
		t.Fatalf("the node re-acquired slot %+v although the record said migrating after its claim", snap.acquired[1])
	}
	if len(snap.fenced) == 0 || !errors.Is(snap.fenced[0], ErrFenced) {
		t.Fatalf("fenced %v; want the session expiry", snap.fenced)
	}
	if st := l.State(); st == StateRegistered {
		t.Fatalf("lease state %v after the refusal", st)
	}
}
