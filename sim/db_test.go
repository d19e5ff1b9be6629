package sim

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/storetest"
	"github.com/idgen/idgen/segment"
)

// The simulated primary keeps the ORDERED rules of the real stores
// through its transactions (the conformance suite, on a node that is
// never paused or killed).
func TestDBConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) ordered.Store {
		_, s := testDB(1)
		return s
	})
}

// The simulated primary holds the owners' leases by the rules of the
// real stores (the lease cases of the conformance suite).
func TestDBLeaseConformance(t *testing.T) {
	storetest.RunLease(t, func(t *testing.T) ordered.LeaseStore {
		_, s := testDB(1)
		return s
	})
}

// testDB returns a database drawn from seed and a connection of a node
// that is never paused or killed.
func testDB(seed uint64) (*db, *nodeDB) {
	d := newDB(seed, false)
	return d, &nodeDB{Store: d.mem, d: d, n: &node{}}
}

// nonce returns the shard's lease nonce.
func (d *db) nonce(shard int) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, _ := d.ord.LeaseNonces(context.Background())
	return n[shard]
}

// A lossy failover puts the replica's older nonces back, and the nonces
// drawn after it are new ones: one a taker saw before the failover
// reads as unchanged only if the replica had it.
func TestDBLeaseFailover(t *testing.T) {
	d, s := testDB(1)
	ctx := context.Background()
	if err := s.Claim(ctx, 5, 1, "a"); err != nil {
		t.Fatal(err)
	}
	nonce := func() string {
		t.Helper()
		n, err := s.LeaseNonces(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n[5]
	}
	n1 := nonce()
	snap := d.snapshot()
	if got, err := s.RenewLease(ctx, "a", []ordered.ShardEpoch{{Shard: 5, Epoch: 1}}); err != nil || len(got) != 1 {
		t.Fatalf("RenewLease = %v, %v", got, err)
	}
	n2 := nonce()
	d.failover(snap)
	if got := nonce(); got != n1 {
		t.Fatalf("nonce after a failover to a replica without the renewal: %q, want the replica's %q", got, n1)
	}
	if got, err := s.RenewLease(ctx, "a", []ordered.ShardEpoch{{Shard: 5, Epoch: 1}}); err != nil || len(got) != 1 {
		t.Fatalf("RenewLease after the failover = %v, %v", got, err)
	}
	if got := nonce(); got == n1 || got == n2 {
		t.Fatalf("renewal after the failover wrote %q, an old nonce (%q, %q)", got, n1, n2)
	}
}

// The lease's writes honour the faults of the other writes: a
// certification conflict refuses a renewal and a claim, storing nothing.
func TestDBLeaseCertConflict(t *testing.T) {
	d, s := testDB(1)
	ctx := context.Background()
	if err := s.Claim(ctx, 2, 1, "a"); err != nil {
		t.Fatal(err)
	}
	before := d.nonce(2)
	d.conflicts.Store(2)
	if _, err := s.RenewLease(ctx, "a", []ordered.ShardEpoch{{Shard: 2, Epoch: 1}}); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("renewal under a certification conflict: %v; want ErrUnavailable", err)
	}
	if err := s.ClaimObserved(ctx, 2, 2, "b", before); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("ClaimObserved under a certification conflict: %v; want ErrUnavailable", err)
	}
	if e, _ := d.ord.Epoch(2); d.nonce(2) != before || e != 1 {
		t.Fatalf("refused commits changed the row: nonce %q -> %q, epoch %d", before, d.nonce(2), e)
	}
}

// The nonces are drawn from the run's seed: two databases of one seed
// draw the same ones.
func TestDBLeaseNoncesPerSeed(t *testing.T) {
	draw := func(seed uint64) string {
		d, s := testDB(seed)
		if err := s.Claim(context.Background(), 0, 1, "a"); err != nil {
			t.Fatal(err)
		}
		return d.nonce(0)
	}
	if a, b, c := draw(7), draw(7), draw(8); a != b || a == c || len(a) != 32 {
		t.Fatalf("nonces of seeds 7, 7, 8: %q, %q, %q; want the same for one seed, 32 characters", a, b, c)
	}
}

// db-fail and db-stall reach the ORDERED shard rows too: a failed write
// has committed (its reply is lost), a read fails before it reads, and a
// stalled write holds its fence row until the stall ends (a Claim waits
// for it). Without this the simulator never drew a persist of unknown
// outcome.
func TestDBFaultsReachOrderedRows(t *testing.T) {
	d, s := testDB(1)
	ctx := context.Background()
	if err := s.Claim(ctx, 5, 1, "a"); err != nil {
		t.Fatal(err)
	}
	k := ordered.Key{Biz: "b", SubKey: storetest.SubKeys(5, "k", 1)[0]}
	d.mem.FailNext(1, errStoreDown)
	errs, err := s.PersistShards(ctx, []ordered.ShardWrite{{Shard: 5, Epoch: 1, Rows: []ordered.Row{{Key: k, Num: 7}}}})
	if !errors.Is(err, errStoreDown) {
		t.Fatalf("PersistShards under db-fail = %v, %v; want the injected error", errs, err)
	}
	if got, err := s.Load(ctx, 5, 1, []ordered.Key{k}); err != nil || got[k] != 7 {
		t.Fatalf("after a failed persist: Load = %v, %v; want the row written (the reply was lost, not the commit)", got, err)
	}
	d.mem.FailNext(1, errStoreDown)
	if _, err := s.Load(ctx, 5, 1, []ordered.Key{k}); !errors.Is(err, errStoreDown) {
		t.Fatalf("Load under db-fail = %v; want the injected error", err)
	}
	release := d.mem.Block()
	done := make(chan error, 1)
	go func() {
		_, err := s.PersistShards(ctx, []ordered.ShardWrite{{Shard: 5, Epoch: 1, Rows: []ordered.Row{{Key: k, Num: 9}}}})
		done <- err
	}()
	for d.mem.Blocked() == 0 {
		runtime.Gosched()
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.Claim(short, 5, 2, "b"); !errors.Is(err, ordered.ErrShardBusy) {
		t.Fatalf("Claim while a stalled persist holds the fence row = %v; want ordered.ErrShardBusy", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("stalled persist after the stall: %v", err)
	}
	if err := s.Claim(ctx, 5, 2, "b"); err != nil {
		t.Fatalf("Claim after the stall: %v", err)
	}
}

// The no-fence control (IDGEN_FAULT_ORDERED_NO_EPOCH) reaches the ORDERED
// rows: a deposed owner's persist and write-back land, its claims and
// loads stay fenced. Without the control both are refused.
func TestDBNoFenceControl(t *testing.T) {
	for _, noFence := range []bool{false, true} {
		d := newDB(1, noFence)
		s := &nodeDB{Store: d.mem, d: d, n: &node{}}
		ctx := context.Background()
		k := ordered.Key{Biz: "b", SubKey: storetest.SubKeys(4, "k", 1)[0]}
		if err := s.Claim(ctx, 4, 2, "new"); err != nil {
			t.Fatal(err)
		}
		persistErr := s.Persist(ctx, 4, 1, []ordered.Row{{Key: k, Num: 9}}, nil)
		writeBackErr := s.WriteBack(ctx, 4, 1, []ordered.Row{{Key: k, Num: 3}})
		if fenced := errors.Is(persistErr, ordered.ErrFenced) && errors.Is(writeBackErr, ordered.ErrFenced); fenced == noFence {
			t.Fatalf("noFence %v: stale persist %v, write-back %v", noFence, persistErr, writeBackErr)
		}
		if err := s.Claim(ctx, 4, 1, "old"); !errors.Is(err, ordered.ErrFenced) {
			t.Fatalf("noFence %v: a lower claim: %v; want fenced", noFence, err)
		}
		if _, err := s.Load(ctx, 4, 1, nil); !errors.Is(err, ordered.ErrFenced) {
			t.Fatalf("noFence %v: a stale load: %v; want fenced", noFence, err)
		}
	}
}
