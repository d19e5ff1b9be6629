package orderedtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/orderedtest"
	"github.com/idgen/idgen/ordered/storetest"
	"github.com/idgen/idgen/segment"
)

// The fake keeps every rule of the real stores: the tests that run on it
// rely on nothing a real store does not do.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) ordered.Store { return orderedtest.New() })
}

func TestLeaseConformance(t *testing.T) {
	storetest.RunLease(t, func(t *testing.T) ordered.LeaseStore { return orderedtest.New() })
}

// An unreachable store refuses every call, retryably, and changes
// nothing; reachable again, it holds what it held.
func TestUnreachable(t *testing.T) {
	ctx := context.Background()
	st := orderedtest.New()
	if err := st.Claim(ctx, 3, 1, "a:1"); err != nil {
		t.Fatal(err)
	}
	before, _ := st.LeaseNonces(ctx)
	st.SetUnreachable(true)
	k := ordered.Key{Biz: "b", SubKey: storetest.SubKeys(3, "k", 1)[0]}
	_, lnErr := st.LeaseNonces(ctx)
	_, renErr := st.RenewLease(ctx, "a:1", []ordered.ShardEpoch{{Shard: 3, Epoch: 1}})
	_, loadErr := st.Load(ctx, 3, 1, nil)
	_, lookErr := st.LookupRequests(ctx, "b", "", []string{"x"})
	for what, err := range map[string]error{
		"Claim":          st.Claim(ctx, 3, 2, "b:1"),
		"ClaimObserved":  st.ClaimObserved(ctx, 3, 2, "b:1", before[3]),
		"Persist":        st.Persist(ctx, 3, 1, []ordered.Row{{Key: k, Num: 5}}, nil),
		"WriteBack":      st.WriteBack(ctx, 3, 1, nil),
		"RenewLease":     renErr,
		"LeaseNonces":    lnErr,
		"Load":           loadErr,
		"LookupRequests": lookErr,
	} {
		if !errors.Is(err, orderedtest.ErrUnreachable) || !errors.Is(err, segment.ErrUnavailable) {
			t.Errorf("%s while unreachable: %v; want ErrUnreachable (unavailable)", what, err)
		}
	}
	st.SetUnreachable(false)
	after, _ := st.LeaseNonces(ctx)
	if after[3] != before[3] {
		t.Fatalf("nonce %q -> %q across the refused calls", before[3], after[3])
	}
	if got, err := st.Load(ctx, 3, 1, []ordered.Key{k}); err != nil || len(got) != 0 {
		t.Fatalf("Load after the refused calls = %v, %v; want epoch 1, no row", got, err)
	}
}

// Restore is a lossy failover: epochs, owners and nonces go back to the
// snapshot's, and the nonces drawn after it are new ones.
func TestRestore(t *testing.T) {
	ctx := context.Background()
	st := orderedtest.New()
	if err := st.Claim(ctx, 5, 1, "a:1"); err != nil {
		t.Fatal(err)
	}
	snap := st.Snapshot()
	n1, _ := st.LeaseNonces(ctx)
	if err := st.Claim(ctx, 5, 2, "b:1"); err != nil {
		t.Fatal(err)
	}
	n2, _ := st.LeaseNonces(ctx)
	st.Restore(snap)
	if got, _ := st.LeaseNonces(ctx); got[5] != n1[5] {
		t.Fatalf("nonce after the restore %q, want the snapshot's %q", got[5], n1[5])
	}
	if got, err := st.RenewLease(ctx, "a:1", []ordered.ShardEpoch{{Shard: 5, Epoch: 1}}); err != nil || len(got) != 1 {
		t.Fatalf("renewal of the restored owner = %v, %v; want shard 5 renewed", got, err)
	}
	if got, _ := st.LeaseNonces(ctx); got[5] == n1[5] || got[5] == n2[5] {
		t.Fatalf("renewal after the restore wrote %q, an old nonce (%q, %q)", got[5], n1[5], n2[5])
	}
}
