package ordered

import (
	"context"
	"fmt"
)

// The allocator's side of the store-held lease (storelease.go): it
// renews the shards it serves and claims over an observed nonce.

var _ LeaseHandler = (*Allocator)(nil)

// leaseStore is the store as a LeaseStore (nil when it holds no leases).
func (a *Allocator) leaseStore() LeaseStore {
	ls, _ := a.cfg.Store.(LeaseStore)
	return ls
}

// StoreLeases implements LeaseHandler: the store holds leases.
func (a *Allocator) StoreLeases() bool { return a.leaseStore() != nil }

// RenewLease implements LeaseHandler: one store renewal of every shard
// this allocator serves (its current terms, those in their lease wait
// included), through the gate. ok is false when a shard was not renewed
// (claimed over), when a shard's term changed meanwhile, or when the gate
// closed since the renewal entered it (a MySQL server change: the new
// server may have lost a claim, and the barrier decides).
func (a *Allocator) RenewLease(ctx context.Context) (bool, error) {
	ls := a.leaseStore()
	if ls == nil {
		return false, fmt.Errorf("ordered: RenewLease: the store holds no leases")
	}
	var terms []*shard
	var parts []ShardEpoch
	for i := range a.shards {
		if sh := a.shards[i].Load(); sh != nil {
			terms = append(terms, sh)
			parts = append(parts, ShardEpoch{Shard: i, Epoch: sh.grant.Epoch})
		}
	}
	if len(parts) == 0 {
		return true, nil
	}
	var token uint64
	if a.cfg.Gate != nil {
		var err error
		if token, err = a.cfg.Gate.Enter(); err != nil {
			return false, err
		}
	}
	renewed, err := ls.RenewLease(ctx, a.owner, parts)
	if err != nil {
		return false, err
	}
	if a.cfg.Gate != nil {
		if err := a.cfg.Gate.Check(token); err != nil {
			return false, err
		}
	}
	ok := len(renewed) == len(parts)
	for i, sh := range terms {
		if a.shards[parts[i].Shard].Load() != sh {
			ok = false
		}
	}
	return ok, nil
}

// LeaseNonces implements LeaseHandler: every shard's store nonce.
func (a *Allocator) LeaseNonces(ctx context.Context) ([]string, error) {
	ls := a.leaseStore()
	if ls == nil {
		return nil, fmt.Errorf("ordered: LeaseNonces: the store holds no leases")
	}
	return ls.LeaseNonces(ctx)
}

// claim claims g in the store: over the nonce the coordinator observed
// when it asks for the check (and the store holds leases), else plainly.
func (a *Allocator) claim(ctx context.Context, g Grant) error {
	if ls := a.leaseStore(); ls != nil && g.CheckLease {
		return ls.ClaimObserved(ctx, g.Shard, g.Epoch, a.owner, g.Observed)
	}
	return a.cfg.Store.Claim(ctx, g.Shard, g.Epoch, a.owner)
}
