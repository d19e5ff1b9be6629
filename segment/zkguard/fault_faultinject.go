//go:build faultinject

package zkguard

import "os"

// Fault-injection hooks (negative controls of issue 29's holes; only
// builds with the faultinject tag contain this file).

// faultUnverifiedNotRecorded (IDGEN_FAULT_UNVERIFIED_NOT_RECORDED=1)
// reopens hole f's last link: a segment served unverified while ZooKeeper
// was unreachable is never written to the ledger.
func faultUnverifiedNotRecorded() bool {
	return os.Getenv("IDGEN_FAULT_UNVERIFIED_NOT_RECORDED") == "1"
}

// faultGuardOwnClient (IDGEN_FAULT_GUARD_OWN_CLIENT=1) reopens hole e:
// the guard dials its own plain ZooKeeper client instead of a
// cluster/zksession Session, and never recovers from a wipe.
func faultGuardOwnClient() bool { return os.Getenv("IDGEN_FAULT_GUARD_OWN_CLIENT") == "1" }

// faultEphemeralMembers (IDGEN_FAULT_BARRIER_EPHEMERAL_MEMBERS=1) reopens
// hole c: barrier membership is an ephemeral acknowledgement, gone with
// the session, with no "serving until" bound; the gate opens after
// BarrierWait whoever may still serve.
func faultEphemeralMembers() bool { return os.Getenv("IDGEN_FAULT_BARRIER_EPHEMERAL_MEMBERS") == "1" }

// faultNoRestoreReset (IDGEN_FAULT_BARRIER_NO_RESTORE_RESET=1) reopens
// hole d: a generation that went back (ZooKeeper restored from an older
// copy) is ignored; the guard keeps its acknowledged generation.
func faultNoRestoreReset() bool { return os.Getenv("IDGEN_FAULT_BARRIER_NO_RESTORE_RESET") == "1" }

// faultIgnoreParted (IDGEN_FAULT_IGNORE_PARTED=1) neither writes a leaving
// node's marks nor raises those of nodes that left, as before: a node that
// stopped cleanly shortly before a lossy failover took its memory with it.
func faultIgnoreParted() bool { return os.Getenv("IDGEN_FAULT_IGNORE_PARTED") == "1" }

// faultNoOutageGrace (IDGEN_FAULT_NO_OUTAGE_GRACE=1) counts a member gone
// as soon as its bound passed, even when it passed while this node could
// not reach ZooKeeper either, as before: after an outage of the whole
// ensemble the first node back opened its gate before the others raised
// their rows (simulator seed 163).
func faultNoOutageGrace() bool { return os.Getenv("IDGEN_FAULT_NO_OUTAGE_GRACE") == "1" }

// faultNoRestoreHold (IDGEN_FAULT_NO_RESTORE_HOLD=1) opens the gate after
// a ZooKeeper restore as soon as the members ZooKeeper still lists have
// acknowledged, as before: the members whose records the restore lost are
// not waited for (simulator seed 1032).
func faultNoRestoreHold() bool { return os.Getenv("IDGEN_FAULT_NO_RESTORE_HOLD") == "1" }

// faultMemberPerNode (IDGEN_FAULT_MEMBER_PER_NODE=1) names the member
// record by node alone, as before: a process restarted under the same
// name overwrites its killed predecessor's record, and a lossy failover
// soon after repeats the predecessor's last numbers with the barrier
// reporting every member acknowledged (simulator seed 1120).
func faultMemberPerNode() bool { return os.Getenv("IDGEN_FAULT_MEMBER_PER_NODE") == "1" }

// faultBoundAnyReplication (IDGEN_FAULT_BOUND_ANY_REPLICATION=1) is the
// negative control of refreshUnverified: the member bound may pass while
// ZooKeeper is out of reach whatever the replication, so a node cut off
// from ZooKeeper serves from memory after the others' barrier counted it
// gone across a lossy failover.
func faultBoundAnyReplication() bool { return os.Getenv("IDGEN_FAULT_BOUND_ANY_REPLICATION") == "1" }

// faultStaleMemberWrite (IDGEN_FAULT_STALE_MEMBER_WRITE=1) lets a member
// record write that timed out and went on in the background overwrite a
// later renewal, as before: the record's bound goes back while this
// process serves under the later one, and the others may count it gone
// too early (TestStaleRenewalDoesNotShortenTheBound).
func faultStaleMemberWrite() bool { return os.Getenv("IDGEN_FAULT_STALE_MEMBER_WRITE") == "1" }
