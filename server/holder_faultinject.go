//go:build faultinject

package server

import (
	"os"

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
