package ordered_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/orderedtest"
	"github.com/idgen/idgen/ordered/storetest"
	"github.com/idgen/idgen/segment"
)

// The allocator's side of the store-held lease, on orderedtest's store
// (an external test package: orderedtest imports ordered).

// subKeyIn returns a sub key of shard s.
func subKeyIn(s int) string { return storetest.SubKeys(s, "k", 1)[0] }

// A hand-off clears the shard's store nonce, also when the shard has no
// rows to write back, so the next owner serves at once.
func TestReleaseClearsNonce(t *testing.T) {
	clk := ordered.NewFakeClock()
	st := orderedtest.New()
	a := ordered.NewTestAllocator(t, st, clk, "a:1", nil)
	for _, s := range []int{2, 9} {
		if err := a.Acquire(context.Background(), ordered.Grant{Shard: s, Epoch: 1, NotBefore: clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	key := subKeyIn(9)
	if _, err := a.Take(context.Background(), ordered.BizMode("biz", segment.OrderedGapless), key, 1, segment.RequestID{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []int{2, 9} { // 2 has no rows, 9 has one
		if nonces, _ := st.LeaseNonces(context.Background()); nonces[s] == "" {
			t.Fatalf("shard %d: no nonce while owned", s)
		}
		if err := a.Release(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		if nonces, _ := st.LeaseNonces(context.Background()); nonces[s] != "" {
			t.Fatalf("shard %d: nonce %q after the hand-off; want cleared", s, nonces[s])
		}
	}
}

// The allocator renews exactly the shards it serves, and says so only
// when every one of them was renewed under a gate token still valid.
func TestRenewLeaseCoversServedShards(t *testing.T) {
	clk := ordered.NewFakeClock()
	st := orderedtest.New()
	g := ordered.NewFakeGate()
	a := ordered.NewTestAllocator(t, st, clk, "a:1", g)
	if !a.StoreLeases() {
		t.Fatal("StoreLeases false on a LeaseStore")
	}
	if ok, err := a.RenewLease(context.Background()); !ok || err != nil {
		t.Fatalf("renewal with no shard served: %v, %v; want ok (nothing to cover)", ok, err)
	}
	for _, s := range []int{3, 7} {
		if err := a.Acquire(context.Background(), ordered.Grant{Shard: s, Epoch: 1, NotBefore: clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := st.LeaseNonces(context.Background())
	if ok, err := a.RenewLease(context.Background()); !ok || err != nil {
		t.Fatalf("renewal: %v, %v", ok, err)
	}
	after, _ := st.LeaseNonces(context.Background())
	for s := range after {
		if changed := after[s] != before[s]; changed != (s == 3 || s == 7) {
			t.Fatalf("shard %d: nonce %q -> %q", s, before[s], after[s])
		}
	}
	// Shard 7 claimed over by another owner: not renewed, not ok.
	if err := st.Claim(context.Background(), 7, 2, "b:1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.RenewLease(context.Background()); ok || err != nil {
		t.Fatalf("renewal with shard 7 claimed over: %v, %v; want not ok", ok, err)
	}
	a.Lost(7)
	// The gate closes while the renewal runs (a MySQL server change).
	g.CloseOnNextEnter()
	if ok, err := a.RenewLease(context.Background()); ok || !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("renewal across a gate closing: %v, %v; want not ok, unavailable", ok, err)
	}
	// Closed: no renewal at all.
	if ok, err := a.RenewLease(context.Background()); ok || err == nil {
		t.Fatalf("renewal through a closed gate: %v, %v", ok, err)
	}
}

// A grant that asks for the lease check claims over the observed nonce
// only: a nonce that moved refuses the claim (ErrLeaseRenewed) and the
// shard is not served; without the check the claim is plain.
func TestAcquireChecksObservedNonce(t *testing.T) {
	clk := ordered.NewFakeClock()
	st := orderedtest.New()
	old := ordered.NewTestAllocator(t, st, clk, "old:1", nil)
	if err := old.Acquire(context.Background(), ordered.Grant{Shard: 5, Epoch: 1, NotBefore: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	seen, _ := st.LeaseNonces(context.Background())
	if _, err := old.RenewLease(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := ordered.NewTestAllocator(t, st, clk, "new:1", nil)
	err := a.Acquire(context.Background(), ordered.Grant{Shard: 5, Epoch: 2, NotBefore: clk.Now(), CheckLease: true, Observed: seen[5]})
	if !errors.Is(err, ordered.ErrLeaseRenewed) || a.Holds(subKeyIn(5)) {
		t.Fatalf("claim over a moved nonce: %v (serving %v); want ErrLeaseRenewed, not serving", err, a.Holds(subKeyIn(5)))
	}
	now, _ := st.LeaseNonces(context.Background())
	if err := a.Acquire(context.Background(), ordered.Grant{Shard: 5, Epoch: 2, NotBefore: clk.Now(), CheckLease: true, Observed: now[5]}); err != nil {
		t.Fatalf("claim over the current nonce: %v", err)
	}
	// The old owner's next renewal renews nothing.
	if ok, err := old.RenewLease(context.Background()); ok || err != nil {
		t.Fatalf("old owner's renewal after the claim: %v, %v; want not ok", ok, err)
	}
	// No check asked: a plain claim, whatever the nonce.
	if err := old.Acquire(context.Background(), ordered.Grant{Shard: 5, Epoch: 3, NotBefore: clk.Now()}); err != nil {
		t.Fatalf("plain claim: %v", err)
	}
}

// A store without leases: the allocator says so and refuses the calls.
func TestNoStoreLeasesWithoutLeaseStore(t *testing.T) {
	// A LeaseStore behind the plain Store interface: its lease methods
	// hidden, as on a store that has none.
	plain := struct{ ordered.Store }{orderedtest.New()}
	a := ordered.NewTestAllocator(t, plain, ordered.NewFakeClock(), "a:1", nil)
	if a.StoreLeases() {
		t.Fatal("StoreLeases true on a plain Store")
	}
	if _, err := a.RenewLease(context.Background()); err == nil {
		t.Fatal("RenewLease without a LeaseStore succeeded")
	}
	if _, err := a.LeaseNonces(context.Background()); err == nil {
		t.Fatal("LeaseNonces without a LeaseStore succeeded")
	}
}
