package zkown

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/orderedtest"
)

// leaser is a recorder whose store holds leases (an ordered.LeaseHandler)
// in an orderedtest.Store, as the allocator does: it claims there (over
// the observed nonce when the grant asks for the check), renews the
// shards it holds and clears a shard's nonce when it releases it (the
// write-back of a hand-off).
type leaser struct {
	*recorder
	store *orderedtest.Store
	mu    sync.Mutex
	// duringFn is called inside RenewLease, between its snapshot of the
	// held shards and the store (a test's interleaving).
	duringFn func()
}

func (l *leaser) StoreLeases() bool { return true }

func (l *leaser) Acquire(ctx context.Context, g ordered.Grant) error {
	var err error
	if g.CheckLease {
		err = l.store.ClaimObserved(ctx, g.Shard, g.Epoch, l.name, g.Observed)
	} else {
		err = l.store.Claim(ctx, g.Shard, g.Epoch, l.name)
	}
	if err != nil {
		l.j.add(event{node: l.name, kind: "acquire-failed", shard: g.Shard, grant: g, at: l.clock.Now()})
		return err
	}
	return l.recorder.Acquire(ctx, g)
}

func (l *leaser) Release(ctx context.Context, s int) error {
	g, held := l.heldShards()[s]
	err := l.recorder.Release(ctx, s)
	if err == nil && held {
		// The hand-off's write-back (no rows here) clears the nonce;
		// fenced when the shard was claimed over meanwhile.
		_ = l.store.WriteBack(ctx, s, g.Epoch, nil)
	}
	return err
}

func (l *leaser) RenewLease(ctx context.Context) (bool, error) {
	held := l.heldShards()
	l.mu.Lock()
	fn := l.duringFn
	l.mu.Unlock()
	if fn != nil {
		fn()
	}
	parts := make([]ordered.ShardEpoch, 0, len(held))
	for s, g := range held {
		parts = append(parts, ordered.ShardEpoch{Shard: s, Epoch: g.Epoch})
	}
	renewed, err := l.store.RenewLease(ctx, l.name, parts)
	if err != nil {
		return false, err
	}
	return len(renewed) == len(held), nil
}

func (l *leaser) LeaseNonces(ctx context.Context) ([]string, error) {
	return l.store.LeaseNonces(ctx)
}

// fastTimeout makes ZooKeeper calls of a node cut off fail fast.
func fastTimeout(cfg *Config) { cfg.Timeout = 20 * time.Millisecond }

// leaseNode is a node of w whose handler holds leases in store.
func (w *world) leaseNode(self string, store *orderedtest.Store, mod func(*Config)) (*tnode, *leaser) {
	w.t.Helper()
	var l *leaser
	n := w.nodeWith(self, func(cfg *Config) {
		cfg.StoreLease = true
		if mod != nil {
			mod(cfg)
		}
	}, func(r *recorder) ordered.Handler {
		l = &leaser{recorder: r, store: store}
		return l
	})
	return n, l
}

// settleStore is settle for nodes with store leases.
func settleStore(t *testing.T, w *world, nodes ...*tnode) {
	t.Helper()
	settle(t, w, 80, nodes...)
}

// A node configured with StoreLease advertises it from its znode's
// creation: the other nodes use store leases from their first look. Its
// Start refuses a handler whose store holds none.
func TestStoreLeaseAdvertisedFromCreation(t *testing.T) {
	w := newWorld(t)
	store := orderedtest.New()
	a, _ := w.leaseNode(addrA, store, nil)
	w.leaseNode(addrB, store, nil)
	a.c.round(context.Background()) // a's first look, before any renewal of b
	a.c.mu.Lock()
	ok := a.c.storePeersOK
	a.c.mu.Unlock()
	if !ok {
		t.Fatal("a does not count on b's store leases at its first look")
	}
	c, err := newCoordinator(context.Background(), func() Config { cfg := w.config("10.0.0.3:8888"); cfg.StoreLease = true; return cfg }(), w.fz.connect())
	if err != nil {
		t.Fatal(err)
	}
	defer abandon(c)
	if err := c.attach(newRecorder("10.0.0.3:8888", w.clk, w.j)); err == nil {
		t.Fatal("Start with StoreLease and a handler without store leases succeeded")
	}
}

// A whole ZooKeeper outage: every node keeps its shards and its lease on
// the store's renewals, for 10 leases; nothing changes hands. The
// negative control is TestZooKeeperUnreachable: without store leases the
// same outage loses every shard one lease in.
func TestStoreLeaseRidesZooKeeperOutage(t *testing.T) {
	w := newWorld(t)
	store := orderedtest.New()
	a, _ := w.leaseNode(addrA, store, fastTimeout)
	b, _ := w.leaseNode(addrB, store, fastTimeout)
	settleStore(t, w, a, b)
	setDown(a.conn, true)
	setDown(b.conn, true)
	mark := w.j.len()
	for range 10 * 6 {
		w.stepAll(testTick, a, b)
		now := w.clk.Now()
		for _, n := range []*tnode{a, b} {
			if !now.Before(n.c.ValidUntil()) {
				t.Fatalf("%s: lease ran out at %v (ValidUntil %v) although the store renews", n.self, now, n.c.ValidUntil())
			}
		}
	}
	if evs := w.j.since(mark); len(evs) != 0 {
		t.Fatalf("%d handler calls during the outage, first %+v", len(evs), evs[0])
	}
	if st := a.c.Stats(); st.StoreCarried == 0 || st.LeaseLapses != 0 {
		t.Fatalf("A's stats %+v: want the lease carried by the store, no lapse", st)
	}
	setDown(a.conn, false)
	setDown(b.conn, false)
	w.stepAll(testTick, a, b)
	if evs := w.j.since(mark); len(evs) != 0 {
		t.Fatalf("%d handler calls after the outage, first %+v", len(evs), evs[0])
	}
	checkAssignment(t, w, a, b)

	// And when the store goes too, the lease runs out as before.
	setDown(a.conn, true)
	store.SetUnreachable(true)
	aUntil := a.c.ValidUntil()
	for range 2 * 6 {
		w.stepAll(testTick, a)
	}
	lost := filter(w.j.since(mark), addrA, "lost")
	if len(lost) == 0 {
		t.Fatal("A kept its shards with neither ZooKeeper nor the store answering")
	}
	for _, e := range lost {
		if e.at.Before(aUntil) {
			t.Fatalf("shard %d lost at %v, before ValidUntil %v", e.shard, e.at, aUntil)
		}
	}
}

// partitioned runs A cut off from ZooKeeper while it still reaches the
// store, B healthy, for 6 leases; it returns B's takeovers of A's shards
// and fails the test if any of them serves while A's lease, carried by
// the store, still runs.
func partitioned(t *testing.T, ignore bool) []event {
	w := newWorld(t)
	store := orderedtest.New()
	a, _ := w.leaseNode(addrA, store, fastTimeout)
	b, _ := w.leaseNode(addrB, store, func(cfg *Config) { cfg.unsafeIgnoreStoreLease = ignore })
	settleStore(t, w, a, b)
	aShards := a.held()
	setDown(a.conn, true)
	mark := w.j.len()
	var overlaps []string
	for range 6 * 6 {
		w.stepAll(testTick, a, b)
		now := w.clk.Now()
		for _, e := range filter(w.j.since(mark), addrB, "acquire") {
			if _, still := a.h.heldShards()[e.shard]; still && !now.Before(e.grant.NotBefore) && now.Before(a.c.ValidUntil()) {
				overlaps = append(overlaps, fmt.Sprintf("shard %d: B serves from %v, A's lease runs until %v", e.shard, e.grant.NotBefore, a.c.ValidUntil()))
			}
		}
	}
	if len(aShards) == 0 {
		t.Fatal("A held nothing")
	}
	if ignore {
		if len(overlaps) == 0 {
			t.Fatal("negative control: B ignoring the store lease never served beside A: the check cannot fail")
		}
		return nil
	}
	if len(overlaps) > 0 {
		t.Fatalf("two owners answer: %v", overlaps[0])
	}
	if st := b.c.Stats(); st.TakeoversDeferred == 0 {
		t.Fatalf("B's stats %+v: no takeover counted as deferred by the store lease", st)
	}
	return filter(w.j.since(mark), addrB, "acquire")
}

// A node cut off from ZooKeeper (its clients still reach it, it still
// reaches MySQL) keeps its shards: the other node sees its znode go stale
// but its store nonces move, and takes nothing. With the taker ignoring
// the store lease (the fault injection's switch), it serves beside the
// cut-off owner: the negative control.
func TestStoreLeaseBlocksTakeoverOfCutOffOwner(t *testing.T) {
	if took := partitioned(t, false); len(took) != 0 {
		t.Fatalf("B took %d shards of A while A renewed through the store", len(took))
	}
	t.Run("negative control", func(t *testing.T) { partitioned(t, true) })
}

// When a cut-off owner stops renewing in the store too (paused), the
// other node takes its shards a lease after the last nonce it saw, with
// the nonce check in the claim, and serves after A's store-carried lease.
func TestStoreLeaseTakeoverAfterNonceStands(t *testing.T) {
	w := newWorld(t)
	store := orderedtest.New()
	a, _ := w.leaseNode(addrA, store, fastTimeout)
	b, _ := w.leaseNode(addrB, store, nil)
	settleStore(t, w, a, b)
	setDown(a.conn, true)
	for range 2 * 6 {
		w.stepAll(testTick, a, b)
	}
	// A pauses: no ZooKeeper, no store renewal.
	aUntil := a.c.ValidUntil()
	lastSeen := w.clk.Now() // B's round ran after A's last store renewal
	mark := w.j.len()
	for range 4 * 6 {
		w.stepAll(testTick, b)
	}
	acq := filter(w.j.since(mark), addrB, "acquire")
	if len(acq) == 0 {
		t.Fatal("B never took the paused A's shards")
	}
	for _, e := range acq {
		if !e.grant.CheckLease || e.grant.Observed == "" {
			t.Fatalf("shard %d: grant %+v without the store nonce check", e.shard, e.grant)
		}
		if !e.grant.NotBefore.After(aUntil) || e.grant.NotBefore.Before(lastSeen.Add(testLease+testMargin)) {
			t.Fatalf("shard %d: NotBefore %v; A's lease ran until %v, B last saw A's nonce change at %v", e.shard, e.grant.NotBefore, aUntil, lastSeen)
		}
	}
	checkEpochs(t, w)
}

// A renewal that raced the claim: the nonce moved between the taker's
// observation and its claim. The claim is refused (ErrLeaseRenewed), the
// shard stays the owner's in the store, and the taker retries soon.
func TestClaimRefusedWhenNonceMoved(t *testing.T) {
	w := newWorld(t)
	store := orderedtest.New()
	a, la := w.leaseNode(addrA, store, nil)
	settleStore(t, w, a)
	b, lb := w.leaseNode(addrB, store, nil)
	setDown(a.conn, true)
	// A pauses: B sees A's nonces stand for a lease and claims; A
	// renews once more right before B's first claim.
	var once sync.Once
	lb.acquireHook(func() {
		once.Do(func() {
			if _, err := la.RenewLease(context.Background()); err != nil {
				t.Error(err)
			}
		})
	})
	mark := w.j.len()
	for range 3 * 6 {
		w.stepAll(testTick, b)
	}
	failed := filter(w.j.since(mark), addrB, "acquire-failed")
	if len(failed) == 0 {
		t.Fatal("no claim refused although A renewed after B's observation")
	}
	if st := b.c.Stats(); st.AcquireFailures == 0 {
		t.Fatalf("B's stats %+v", st)
	}
	// Each refused shard is taken later, serving a lease and a margin
	// after A's late renewal at the earliest (B first saw its nonce
	// after it).
	for _, f := range failed {
		for _, e := range filter(w.j.since(mark), addrB, "acquire") {
			if e.shard == f.shard && (e.grant.Epoch <= f.grant.Epoch || e.grant.NotBefore.Before(f.at.Add(testLease+testMargin))) {
				t.Fatalf("shard %d: refused at %v (epoch %d), then granted %+v", f.shard, f.at, f.grant.Epoch, e.grant)
			}
		}
	}
	checkEpochs(t, w)
}

// acquireHook makes the leaser call fn before each claim.
func (l *leaser) acquireHook(fn func()) {
	l.recorder.mu.Lock()
	l.recorder.acquireErr = func(ordered.Grant) error { fn(); return nil }
	l.recorder.mu.Unlock()
}

// A store renewal extends nothing when an acquisition overlapped it, when
// a shard it should have renewed was not, or when another node of the
// cluster does not advertise store leases.
func TestStoreRenewalExtendsOnlyWhenItCovers(t *testing.T) {
	w := newWorld(t)
	store := orderedtest.New()
	a, la := w.leaseNode(addrA, store, fastTimeout)
	settleStore(t, w, a)
	setDown(a.conn, true)
	extends := func() bool {
		before := a.c.ValidUntil()
		w.clk.Add(testTick)
		a.c.storeRenew(context.Background())
		return a.c.ValidUntil().After(before)
	}
	if !extends() {
		t.Fatal("a clean store renewal did not extend (the positive case)")
	}
	la.mu.Lock()
	la.duringFn = func() { a.c.beginAcquire(); a.c.endAcquire() }
	la.mu.Unlock()
	if extends() {
		t.Fatal("a store renewal overlapping an acquisition extended the lease")
	}
	la.mu.Lock()
	la.duringFn = nil
	la.mu.Unlock()
	// A shard claimed over in the store (a newer owner A does not know of).
	s := a.held()[0]
	snap := store.Snapshot()
	if err := store.Claim(context.Background(), s, la.heldShards()[s].Epoch+1, "someone"); err != nil {
		t.Fatal(err)
	}
	if extends() {
		t.Fatal("a store renewal that missed a held shard extended the lease")
	}
	// A lossy failover to a replica without that claim: the row is A's
	// again.
	store.Restore(snap)
	if !extends() {
		t.Fatal("the store renewal did not extend again once it covered every shard")
	}
	// A node without store leases joins: A's lease no longer rides on the
	// store (that node would take A's shards on ZooKeeper's word alone).
	setDown(a.conn, false)
	old := w.node(addrB, nil)
	w.stepAll(testTick, a, old)
	setDown(a.conn, true)
	if extends() {
		t.Fatal("a store renewal extended the lease with a node in the cluster that ignores store leases")
	}
}

// A clean hand-off clears the nonce: the next owner serves at once, as
// before store leases.
func TestHandoffClearsNonceNextOwnerServesAtOnce(t *testing.T) {
	w := newWorld(t)
	store := orderedtest.New()
	a, _ := w.leaseNode(addrA, store, nil)
	settleStore(t, w, a)
	b, _ := w.leaseNode(addrB, store, nil)
	mark := w.j.len()
	settleStore(t, w, a, b)
	acq := filter(w.j.since(mark), addrB, "acquire")
	if len(acq) == 0 {
		t.Fatal("no hand-off to B")
	}
	for _, e := range acq {
		if e.grant.NotBefore.After(e.at) || !e.grant.CheckLease || e.grant.Observed != "" {
			t.Fatalf("shard %d handed off: grant %+v at %v, want served at once over a cleared nonce", e.shard, e.grant, e.at)
		}
	}
}

// A store renewal answered after the lease ran out (a pause while it was
// in flight) extends nothing, and none after it revives the lease: the
// takers may have counted the node out.
func TestLateStoreRenewalExtendsNothing(t *testing.T) {
	w := newWorld(t)
	store := orderedtest.New()
	a, la := w.leaseNode(addrA, store, fastTimeout)
	settleStore(t, w, a)
	setDown(a.conn, true)
	// A renewal answered after the lease ran out (a pause in flight)
	// extends nothing: the takers may have counted A out.
	la.mu.Lock()
	la.duringFn = func() { w.clk.Add(testLease) }
	la.mu.Unlock()
	before := a.c.ValidUntil()
	a.c.storeRenew(context.Background())
	if !a.c.ValidUntil().Equal(before) {
		t.Fatalf("a renewal answered after the lease ran out moved ValidUntil %v -> %v", before, a.c.ValidUntil())
	}
	la.mu.Lock()
	la.duringFn = nil
	la.mu.Unlock()
	if a.c.storeRenew(context.Background()); !a.c.ValidUntil().Equal(before) {
		t.Fatal("a renewal after the lapse revived the lease")
	}
}

// With a replication that can lose writes (Config.StoreSafe false) the
// node renews in ZooKeeper only: no store renewal, no extension, its
// nonces stand, and a ZooKeeper outage runs its lease out as before.
func TestNoStoreLeaseOverLossyReplication(t *testing.T) {
	w := newWorld(t)
	store := orderedtest.New()
	var safe atomic.Bool
	safe.Store(true)
	a, la := w.leaseNode(addrA, store, func(cfg *Config) {
		cfg.Timeout = 20 * time.Millisecond
		cfg.StoreSafe = safe.Load
	})
	settleStore(t, w, a)
	safe.Store(false)
	nonces, _ := la.LeaseNonces(context.Background())
	setDown(a.conn, true)
	mark := w.j.len()
	for range 2 * 6 {
		w.stepAll(testTick, a)
	}
	if st := a.c.Stats(); st.StoreCarried != 0 {
		t.Fatalf("stats %+v: the store carried the lease over a lossy replication", st)
	}
	if len(filter(w.j.since(mark), addrA, "lost")) == 0 {
		t.Fatal("the lease did not run out in a ZooKeeper outage over a lossy replication")
	}
	if now, _ := la.LeaseNonces(context.Background()); !slices.Equal(now, nonces) {
		t.Fatal("the nonces moved: the store lease was renewed over a lossy replication")
	}
}
