package ordered

import (
	"context"
	"errors"
)

// The store-held lease: ORDERED through a coordinator outage.
//
// An owner's lease comes from its coordinator (ZooKeeper, package zkown):
// without ZooKeeper it cannot renew, and it stopped answering one lease
// into an outage although nobody could take its shards over (takeovers
// need ZooKeeper too). A LeaseStore lets the owner renew in the store as
// well, and makes the takers respect it:
//
//   - Every shard row holds a lease nonce. The owner's renewals write a
//     fresh random nonce into the rows of the shards it serves (only where
//     the stored epoch and owner are still its own); every Claim writes a
//     fresh one too, and a WriteBack (the exact counters of a clean
//     hand-off, written after the owner stopped answering; a hand-off
//     with no rows writes back nothing but this) clears it (""), which
//     no renewal sets again.
//   - A node that would take a shard over reads the nonces every round
//     (LeaseNonces) and takes the shard only once its nonce has not
//     changed for a lease since it first saw it (or is ""), and serves
//     one lease and a margin after that first sight at the earliest. Its
//     claim is ClaimObserved: refused (ErrLeaseRenewed) when the nonce
//     changed since, in the same transaction that raises the epoch.
//
// So a renewal of the owner either committed before the claim, and then
// it wrote the nonce the taker saw (sent before the taker's first sight:
// its extension ends before the taker serves) or a nonce the claim
// refuses; or it commits after the claim, sees the raised epoch and
// renews nothing. An owner extends its lease with a store renewal only
// under the same rules as a coordinator renewal (answered before the
// lease ran out, on both clocks), only when every shard it serves was
// renewed, and only under a gate token that stayed valid: a renewal on a
// new MySQL server (a lossy failover may have lost a claim) extends
// nothing until the barrier has run.
//
// Nonces are random, never counters: a lossy failover that rolls a
// counter back would let an old value come back and pass for unchanged.

// ShardEpoch names one shard term: a renewal's part.
type ShardEpoch struct {
	Shard int
	Epoch int64
}

// ErrLeaseRenewed: ClaimObserved refused because the shard's owner renewed
// its lease in the store since the nonce was observed: it is alive and
// answering. Nothing changed; the claimer gives the shard up and looks
// again (the owner is reachable through the store, maybe not through the
// coordinator).
var ErrLeaseRenewed = errors.New("ordered: the shard's owner renewed its lease in the store since it was observed (alive)")

// LeaseStore is a Store that also holds the owners' leases (see above).
// Implemented by ordered/mysqlstore and ordered/orderedtest (in memory:
// the unit tests' and the simulator's); a Store
// without it (boltstore: one standalone node) needs none.
//
// Its Claim writes a fresh nonce and its WriteBack clears the nonce of
// the shard, in their transactions.
type LeaseStore interface {
	Store
	// RenewLease writes one fresh nonce into the row of each given shard
	// whose stored epoch is its Epoch, whose stored owner is owner and
	// whose nonce is not cleared, in one transaction, and returns the
	// shards it wrote (ascending). A shard whose row says otherwise is
	// left alone: it was claimed over, or handed off (a renewal still in
	// flight when its hand-off cleared the nonce must not set it again,
	// or the next owner would wait a lease for nothing).
	RenewLease(ctx context.Context, owner string, shards []ShardEpoch) (renewed []int, err error)
	// LeaseNonces returns every shard's lease nonce, indexed by shard
	// (length segment.OrderedShards; "" for a shard without a row or with
	// a cleared lease).
	LeaseNonces(ctx context.Context) ([]string, error)
	// ClaimObserved is Claim, also conditional on the shard's stored
	// nonce being observed, checked in the claim's transaction (a write
	// on the row, so Galera certifies it against a renewal on another
	// member): ErrLeaseRenewed, and nothing changed, when it is not.
	ClaimObserved(ctx context.Context, shard int, epoch int64, owner, observed string) error
}

// LeaseHandler is a Handler whose store holds leases (the Allocator on a
// LeaseStore): the coordinator renews through it and reads the nonces
// through it.
type LeaseHandler interface {
	Handler
	// StoreLeases reports whether the handler's store holds leases.
	StoreLeases() bool
	// RenewLease renews, in the store, every shard the handler serves
	// when it is called, through the gate. ok reports whether every one
	// of them was renewed under a gate token still valid afterwards:
	// only then may the renewal extend the lease.
	RenewLease(ctx context.Context) (ok bool, err error)
	// LeaseNonces is LeaseStore.LeaseNonces.
	LeaseNonces(ctx context.Context) ([]string, error)
}
