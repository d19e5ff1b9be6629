//go:build faultinject

package server

import (
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/worker"
)

// faultSlot is the fault-injection suite's negative control (./build.sh
// faults): with IDGEN_FAULT_IGNORE_NOT_BEFORE=1 the node forgets the slot's
// NotBefore, so a holder that takes a slot issues at once instead of waiting
// past the high-water mark of its previous holders. That breaks rule 2 of
// the slot invariant on purpose; the suite checks that its checker then sees
// duplicates. Only builds with the faultinject tag contain this file.
//
// With IDGEN_FAULT_IGNORE_RESTORE=1 (neg-restore) the node waits only past
// the slot's own marks, ignoring the cluster's restore and epoch bound, as
// idgen did before issue 17: after a ZooKeeper restore it trusts stale marks.
func faultSlot(s worker.Slot) worker.Slot {
	if os.Getenv("IDGEN_FAULT_IGNORE_NOT_BEFORE") == "1" {
		s.NotBefore = 0
	}
	if os.Getenv("IDGEN_FAULT_IGNORE_RESTORE") == "1" {
		s.NotBefore = s.MarkNotBefore
	}
	return s
}

// faultInjectBuild: this binary has the faultinject hooks.
const faultInjectBuild = true

// faultNoReplicationGuard is the negative control of the replicated-MySQL
// scenarios (neg-failover-guard): with IDGEN_FAULT_NO_REPLICATION_GUARD=1
// the node runs without the ZooKeeper ledger and barrier, as idgen did
// before issue 18, so a lossy failover repeats numbers.
func faultNoReplicationGuard() bool { return os.Getenv("IDGEN_FAULT_NO_REPLICATION_GUARD") == "1" }

// faultOrderedNoLeaseWait is the negative control of the lease wait
// (IDGEN_FAULT_ORDERED_NO_LEASE_WAIT=1): a new ORDERED shard owner serves
// at once, while the old owner may still answer.
func faultOrderedNoLeaseWait() bool { return os.Getenv("IDGEN_FAULT_ORDERED_NO_LEASE_WAIT") == "1" }

// faultOrderedNoEpoch is the negative control of the epoch condition
// (IDGEN_FAULT_ORDERED_NO_EPOCH=1): persists are not fenced, so a deposed
// owner's write-back lowers rows a newer owner moved.
func faultOrderedNoEpoch() bool { return os.Getenv("IDGEN_FAULT_ORDERED_NO_EPOCH") == "1" }

// faultHandOffStall (IDGEN_FAULT_ORDERED_HANDOFF_STALL=<duration>) stalls a
// planned hand-off before the write-back of each shard's exact counters,
// once per process: the fault suite pauses the node there past its lease
// (ordered-stale-handoff, neg-ordered-epoch).
func faultHandOffStall(log *zap.Logger) func(int) {
	d, err := time.ParseDuration(os.Getenv("IDGEN_FAULT_ORDERED_HANDOFF_STALL"))
	if err != nil || d <= 0 {
		return nil
	}
	var once sync.Once
	return func(shard int) {
		once.Do(func() {
			log.Warn("faultinject: hand-off stalled before the write-back", zap.Int("shard", shard), zap.Duration("stall", d))
			time.Sleep(d)
		})
	}
}
