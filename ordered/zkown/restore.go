package zkown

import (
	"time"

	"go.uber.org/zap"
)

// restored applies the restore rule when the node's session reports that
// ZooKeeper was wiped or restored from an older copy (zksession
// View.Restores grew: the cluster incarnation check, or the lost-writes
// rule without one).
//
// ZooKeeper's records then no longer describe who may answer from
// memory: a shard may read released, or owned by an id long gone, or at
// an epoch below the store's, while the owner of before the loss still
// answers. The rule, the same for every guard:
//
//   - this node stops answering at once: its lease is broken (every held
//     shard is Lost) and its id retired, so it re-joins under a new
//     nodes/<id> on the new session, and its own earlier lease is waited
//     out (retired) before it serves a shard of that id again;
//   - every takeover this node makes serves no earlier than one lease
//     (plus the margin) after the detection (restoreUntil): an owner of
//     before the loss that still answers has, by then, seen its shard's
//     record change (it polls every Lease/6) or lost its lease;
//   - a stored epoch at or above the new grant is waited out as well:
//     the store refuses the claim (ordered.FencedError), and the shard is
//     released above the store's epoch with a lease wait (hole b).
//
// The layout (nodes/, shards/) is re-created on demand.
func (c *Coordinator) restored(why string) {
	if faultNoRestoreRule() {
		c.log.Error("IDGEN_FAULT_ORDERED_NO_RESTORE_RULE=1: a ZooKeeper wipe or restore is ignored (fault injection's negative control)",
			zap.String("why", why))
		return
	}
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	if until := now.Add(c.cfg.Lease + c.cfg.LeaseMargin); until.After(c.restoreUntil) {
		c.restoreUntil = until
	}
	old := c.id
	if c.nodeOK {
		c.retired[old] = c.validUn
	}
	c.id = newID(c.cfg.Self)
	c.nodeOK = false
	held := len(c.held)
	c.breakLocked("ZooKeeper was wiped or restored from an older copy")
	// Nothing read before the loss is trusted: every shard is read again.
	for s := range c.view {
		c.view[s] = shardView{}
	}
	restoreUntil := c.restoreUntil
	c.mu.Unlock()
	for s := range c.dirty {
		c.dirty[s].Store(true)
	}
	c.log.Error("ORDERED coordinator: ZooKeeper was wiped or restored; this node stops serving its shards, re-joins under a new id, and every shard it takes waits out one lease",
		zap.String("why", why), zap.String("old_id", old), zap.Int("shards_held", held),
		zap.Duration("takeovers_wait", restoreUntil.Sub(now)))
	wake(c.renewKick)
	wake(c.kick)
}

// restoreWait is the restore rule's bound on takeovers (zero: none).
func (c *Coordinator) restoreWait() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restoreUntil
}
