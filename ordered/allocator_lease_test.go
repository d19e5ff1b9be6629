package ordered

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idgen/idgen/segment"
)

// fakeLeaseStore is fakeStore with store leases (LeaseStore): per shard a
// nonce, written fresh by renewals and claims, checked by ClaimObserved.
type fakeLeaseStore struct {
	*fakeStore
	nonces map[int]string
	n      int
}

func newFakeLeaseStore() *fakeLeaseStore {
	return &fakeLeaseStore{fakeStore: newFakeStore(), nonces: map[int]string{}}
}

func (s *fakeLeaseStore) freshLocked() string { s.n++; return fmt.Sprintf("n%d", s.n) }

func (s *fakeLeaseStore) Claim(ctx context.Context, shard int, epoch int64, owner string) error {
	return s.ClaimObserved(ctx, shard, epoch, owner, "*")
}

func (s *fakeLeaseStore) ClaimObserved(_ context.Context, shard int, epoch int64, owner, observed string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if observed != "*" && s.nonces[shard] != observed {
		return fmt.Errorf("shard %d: %w", shard, ErrLeaseRenewed)
	}
	stored, claimed := s.epochs[shard]
	if stored > epoch || (claimed && stored == epoch && s.owners[shard] != owner) {
		return &FencedError{Shard: shard, Epoch: epoch, Stored: stored}
	}
	s.epochs[shard], s.owners[shard], s.nonces[shard] = epoch, owner, s.freshLocked()
	return nil
}

func (s *fakeLeaseStore) RenewLease(_ context.Context, owner string, shards []ShardEpoch) ([]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nonce := s.freshLocked()
	var out []int
	for _, p := range shards {
		if s.epochs[p.Shard] == p.Epoch && s.owners[p.Shard] == owner && s.nonces[p.Shard] != "" {
			s.nonces[p.Shard] = nonce
			out = append(out, p.Shard)
		}
	}
	return out, nil
}

func (s *fakeLeaseStore) LeaseNonces(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, segment.OrderedShards)
	for k, v := range s.nonces {
		out[k] = v
	}
	return out, nil
}

// WriteBack is fakeStore's, clearing the shard's nonce with it.
func (s *fakeLeaseStore) WriteBack(ctx context.Context, shard int, epoch int64, rows []Row) error {
	if err := s.fakeStore.WriteBack(ctx, shard, epoch, rows); err != nil {
		return err
	}
	s.mu.Lock()
	s.nonces[shard] = ""
	s.mu.Unlock()
	return nil
}

var _ LeaseStore = (*fakeLeaseStore)(nil)

// A hand-off clears the shard's store nonce, also when the shard has no
// rows to write back, so the next owner serves at once.
func TestReleaseClearsNonce(t *testing.T) {
	clk := newFakeClock()
	st := newFakeLeaseStore()
	n := newNode(t, st, clk, "a:1")
	for _, s := range []int{2, 9} {
		if err := n.a.Acquire(context.Background(), Grant{Shard: s, Epoch: 1, NotBefore: clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	key := subKeyIn(t, 9)
	if _, err := n.a.Take(context.Background(), bizMode("biz", segment.OrderedGapless), key, 1, segment.RequestID{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []int{2, 9} { // 2 has no rows, 9 has one
		if nonces, _ := st.LeaseNonces(context.Background()); nonces[s] == "" {
			t.Fatalf("shard %d: no nonce while owned", s)
		}
		if err := n.a.Release(context.Background(), s); err != nil {
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
	clk := newFakeClock()
	st := newFakeLeaseStore()
	g := newFakeGate()
	n := gatedNode(t, st, clk, "a:1", g)
	if !n.a.StoreLeases() {
		t.Fatal("StoreLeases false on a LeaseStore")
	}
	if ok, err := n.a.RenewLease(context.Background()); !ok || err != nil {
		t.Fatalf("renewal with no shard served: %v, %v; want ok (nothing to cover)", ok, err)
	}
	for _, s := range []int{3, 7} {
		if err := n.a.Acquire(context.Background(), Grant{Shard: s, Epoch: 1, NotBefore: clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := st.LeaseNonces(context.Background())
	if ok, err := n.a.RenewLease(context.Background()); !ok || err != nil {
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
	if ok, err := n.a.RenewLease(context.Background()); ok || err != nil {
		t.Fatalf("renewal with shard 7 claimed over: %v, %v; want not ok", ok, err)
	}
	n.a.Lost(7)
	// The gate closes while the renewal runs (a MySQL server change).
	g.mu.Lock()
	g.onEnter = g.close
	g.mu.Unlock()
	if ok, err := n.a.RenewLease(context.Background()); ok || !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("renewal across a gate closing: %v, %v; want not ok, unavailable", ok, err)
	}
	// Closed: no renewal at all.
	if ok, err := n.a.RenewLease(context.Background()); ok || err == nil {
		t.Fatalf("renewal through a closed gate: %v, %v", ok, err)
	}
}

// A grant that asks for the lease check claims over the observed nonce
// only: a nonce that moved refuses the claim (ErrLeaseRenewed) and the
// shard is not served; without the check the claim is plain.
func TestAcquireChecksObservedNonce(t *testing.T) {
	clk := newFakeClock()
	st := newFakeLeaseStore()
	old := newNode(t, st, clk, "old:1")
	if err := old.a.Acquire(context.Background(), Grant{Shard: 5, Epoch: 1, NotBefore: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	seen, _ := st.LeaseNonces(context.Background())
	if _, err := old.a.RenewLease(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := newNode(t, st, clk, "new:1")
	err := n.a.Acquire(context.Background(), Grant{Shard: 5, Epoch: 2, NotBefore: clk.Now(), CheckLease: true, Observed: seen[5]})
	if !errors.Is(err, ErrLeaseRenewed) || n.a.Holds(subKeyIn(t, 5)) {
		t.Fatalf("claim over a moved nonce: %v (serving %v); want ErrLeaseRenewed, not serving", err, n.a.Holds(subKeyIn(t, 5)))
	}
	now, _ := st.LeaseNonces(context.Background())
	if err := n.a.Acquire(context.Background(), Grant{Shard: 5, Epoch: 2, NotBefore: clk.Now(), CheckLease: true, Observed: now[5]}); err != nil {
		t.Fatalf("claim over the current nonce: %v", err)
	}
	// The old owner's next renewal renews nothing.
	if ok, err := old.a.RenewLease(context.Background()); ok || err != nil {
		t.Fatalf("old owner's renewal after the claim: %v, %v; want not ok", ok, err)
	}
	// No check asked: a plain claim, whatever the nonce.
	if err := old.a.Acquire(context.Background(), Grant{Shard: 5, Epoch: 3, NotBefore: clk.Now()}); err != nil {
		t.Fatalf("plain claim: %v", err)
	}
}

// A store without leases: the allocator says so and refuses the calls.
func TestNoStoreLeasesWithoutLeaseStore(t *testing.T) {
	n := newNode(t, newFakeStore(), newFakeClock(), "a:1")
	if n.a.StoreLeases() {
		t.Fatal("StoreLeases true on a plain Store")
	}
	if _, err := n.a.RenewLease(context.Background()); err == nil {
		t.Fatal("RenewLease without a LeaseStore succeeded")
	}
	if _, err := n.a.LeaseNonces(context.Background()); err == nil {
		t.Fatal("LeaseNonces without a LeaseStore succeeded")
	}
}

// subKeyIn returns a sub key of shard s.
func subKeyIn(t *testing.T, s int) string {
	t.Helper()
	for i := range 100000 {
		k := fmt.Sprintf("k%d", i)
		if segment.Shard(k) == s {
			return k
		}
	}
	t.Fatalf("no sub key in shard %d", s)
	return ""
}
