package zkown

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/ordered"
)

// The store-held lease (ordered/storelease.go has the rules and why they
// hold): ORDERED through a ZooKeeper outage.
//
// When the handler's store holds leases (ordered.LeaseHandler), the
// coordinator
//
//   - renews in the store every Lease/3 as well (storeRenew): a renewal
//     sent at t that renewed every shard the handler serves, answered
//     while the lease still runs (both clocks, same term, no lapse), with
//     no acquisition in flight from its send to its answer, extends
//     ValidUntil to t + Lease - LeaseMargin, exactly as a ZooKeeper
//     renewal does. So while the store answers, a ZooKeeper outage (or
//     this node cut off from ZooKeeper) costs ORDERED nothing;
//   - reads every shard's store nonce every round (pollNonces) and
//     records when it first saw each value;
//   - takes a shard only once its nonce is "" (cleared by a clean
//     hand-off, or never written) or has not changed for Lease since it
//     first saw it, serving one lease and a margin after that first
//     sight at the earliest; its claim checks the nonce it saw
//     (Grant.CheckLease). A predecessor proven dead, UnsafeNoLeaseWait and
//     its fault-injection twin skip this.
//
// An acquisition in flight voids a store renewal: the renewal covers the
// shards served when it was sent, and a shard claimed just before it was
// sent but installed after it would ride on an extension that never
// renewed it (a taker counts from the claim's nonce, which may predate
// the renewal's send).
//
// The store lease is renewed only while the store's replication cannot
// lose an acknowledged write (Config.StoreSafe): across a lossy failover a
// node cut off from ZooKeeper that kept its shards through the store
// could not raise the rows it remembers (the barrier needs ZooKeeper),
// and the others' barrier would count it gone and hand its numbers out
// again. The extension is used only while every node this node last saw in
// nodes/ advertises store leases (nodeRecord.StoreLease): a node of an
// older version takes shards over on ZooKeeper's word alone, and would
// not wait for a lease held in the store.

// nonceObs is one shard's store nonce as this node observed it.
type nonceObs struct {
	ok    bool      // read at least once
	nonce string    // the value last read
	since time.Time // when this node first read that value (Config.Clock)
}

// leaseHandler returns h as an ordered.LeaseHandler when its store holds
// leases.
func leaseHandler(h ordered.Handler) ordered.LeaseHandler {
	if lh, ok := h.(ordered.LeaseHandler); ok && lh.StoreLeases() {
		return lh
	}
	return nil
}

// storeTakerRules reports whether this node's takeovers follow the store
// nonces.
func (c *Coordinator) storeTakerRules() bool {
	return c.lh != nil && !c.cfg.UnsafeNoLeaseWait && !c.cfg.unsafeIgnoreStoreLease && !faultIgnoreStoreLease()
}

// pollNonces reads every shard's store nonce (one statement) and records
// when each value was first seen. false: the store did not answer; the
// round takes nothing (its claims would fail anyway).
func (c *Coordinator) pollNonces(ctx context.Context) bool {
	if c.lh == nil {
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	nonces, err := c.lh.LeaseNonces(rctx)
	cancel()
	seen := c.cfg.Clock.Now()
	if err != nil || len(nonces) != Shards {
		c.log.Debug("ORDERED coordinator: reading the store's lease nonces failed", zap.Error(err), zap.Int("shards", len(nonces)))
		return false
	}
	for s, n := range nonces {
		o := &c.nonces[s]
		if !o.ok || o.nonce != n {
			*o = nonceObs{ok: true, nonce: n, since: seen}
		}
	}
	return true
}

// storeWait applies the store's lease to a takeover of shard s: ready
// false while the shard's nonce has changed within the last Lease (its
// owner renews through the store: it is alive), else the earliest
// NotBefore it allows (zero for a cleared nonce; one lease and a margin
// after the nonce was first seen otherwise) and the nonce the claim must
// still find. A deferral is logged once per episode (noteStoreHeld) and
// the episode ends when the shard becomes ready.
func (c *Coordinator) storeWait(s int, now time.Time) (ready bool, notBefore time.Time, observed string) {
	o := c.nonces[s]
	switch {
	case !o.ok:
		return false, time.Time{}, ""
	case o.nonce == "":
		c.heldNoted[s] = false
		return true, time.Time{}, ""
	case now.Sub(o.since) < c.cfg.Lease:
		return false, time.Time{}, o.nonce
	}
	c.heldNoted[s] = false
	return true, o.since.Add(c.cfg.Lease + c.cfg.LeaseMargin), o.nonce
}

// noteStoreHeld counts a takeover decision deferred because the owner
// renews through the store, and logs the first of an episode (the nonce
// moves at every renewal: a line per nonce was a line every third of a
// lease per shard).
func (c *Coordinator) noteStoreHeld(s int, owner string) {
	c.storeHeld.Add(1)
	if c.heldNoted[s] {
		return
	}
	c.heldNoted[s] = true
	c.log.Info("ORDERED shard: its owner renews its lease through the store; not taken over until that stops for a lease",
		zap.Int("shard", s), zap.String("owner", owner))
}

// startStoreRenewer renews in the store every Lease/3 until Close.
func (c *Coordinator) startStoreRenewer() {
	go c.renewLoop(c.storeDone, nil, func() { c.storeRenew(context.Background()) })
}

// storeRenew renews once in the store and extends the lease when the
// renewal qualifies (see the top of this file).
func (c *Coordinator) storeRenew(ctx context.Context) {
	if c.lh == nil || !c.storeSafe() {
		return
	}
	c.mu.Lock()
	term, gen, quiet := c.term, c.acqGen, c.acquiring == 0
	c.mu.Unlock()
	send, sendWall := c.cfg.Clock.Now(), c.cfg.Wall.Now()
	rctx, cancel := context.WithTimeout(ctx, c.renewTimeout())
	ok, err := c.lh.RenewLease(rctx)
	cancel()
	reply, replyWall := c.cfg.Clock.Now(), c.cfg.Wall.Now()
	if err != nil {
		c.storeRenewFails.Add(1)
		c.log.Debug("ORDERED lease: renewal in the store failed", zap.Error(err))
		return
	}
	c.storeRenewals.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	noGap := reply.Before(c.validUn) && (faultLeaseMonotonicOnly() || ordered.WallBefore(replyWall, c.validUnWall))
	if !ok || !quiet || gen != c.acqGen || term != c.term || c.lapsed || !noGap || !c.storePeersOK {
		return
	}
	until := send.Add(c.cfg.Lease - c.cfg.LeaseMargin)
	if !until.After(c.validUn) {
		return
	}
	if c.zkFailing {
		// The coordinator's own renewals fail: the lease runs on the
		// store's (the alertable case: ZooKeeper is out of reach).
		c.storeCarried.Add(1)
		if !c.onStore {
			c.onStore = true
			c.log.Warn("ORDERED lease runs on the store's renewals: ZooKeeper renewals fail; this node keeps its shards while MySQL answers and nobody can take them over",
				zap.Int("shards", len(c.held)), zap.Time("valid_until", until))
		}
	}
	c.validUn = until
	if w := sendWall.Add(c.cfg.Lease - c.cfg.LeaseMargin); ordered.WallBefore(c.validUnWall, w) {
		c.validUnWall = w
	}
}

// storeSafe reports whether the store lease may be renewed now
// (Config.StoreSafe). While it may not, the node renews in ZooKeeper only,
// as without store leases: its nonces stand, so takers go by ZooKeeper
// alone.
func (c *Coordinator) storeSafe() bool {
	safe := c.cfg.StoreSafe == nil || c.cfg.StoreSafe()
	c.mu.Lock()
	defer c.mu.Unlock()
	if safe == c.storeUnsafe {
		c.storeUnsafe = !safe
		if safe {
			c.log.Info("ORDERED store lease renewed again: the MySQL replication cannot lose a reservation")
		} else {
			c.log.Info("ORDERED store lease not renewed: the MySQL replication can lose a reservation (lossy verdict), so a ZooKeeper outage stops ORDERED after one lease, as before store leases; make the replication lossless (README, Replicated MySQL) to ride it")
		}
	}
	return safe
}

// acquiring brackets a Handler.Acquire: store renewals sent before it
// ends extend nothing (see the top of this file).
func (c *Coordinator) beginAcquire() {
	c.mu.Lock()
	c.acquiring++
	c.acqGen++
	c.mu.Unlock()
}

func (c *Coordinator) endAcquire() {
	c.mu.Lock()
	c.acquiring--
	c.acqGen++
	c.mu.Unlock()
}
