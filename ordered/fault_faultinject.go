//go:build faultinject

package ordered

import "os"

// Negative controls of issue 29 hole a (fault injection builds only; see
// fault_normal.go for what a normal build does). Each reopens one of the
// three fixes, so a test or a fault scenario can show the hole again.

// faultInjectBuild: this binary has the faultinject hooks.
const faultInjectBuild = true

// faultCachedNoGate (IDGEN_FAULT_ORDERED_CACHED_NO_GATE=1) answers from a
// reservation without asking the gate, as before hole a was fixed: the
// owner keeps serving a reservation the new MySQL server may have lost.
func faultCachedNoGate() bool { return os.Getenv("IDGEN_FAULT_ORDERED_CACHED_NO_GATE") == "1" }

// faultRememberAnswered (IDGEN_FAULT_ORDERED_REMEMBER_ANSWERED=1) makes
// Remembered report only the highest number answered, not the end of the
// reservations, as before hole a was fixed.
func faultRememberAnswered() bool { return os.Getenv("IDGEN_FAULT_ORDERED_REMEMBER_ANSWERED") == "1" }

// faultUncleanHandOff (IDGEN_FAULT_ORDERED_UNCLEAN_HANDOFF=1) gives a
// refused hand-off write-back up at once and reports it clean, as before
// hole a was fixed.
func faultUncleanHandOff() bool { return os.Getenv("IDGEN_FAULT_ORDERED_UNCLEAN_HANDOFF") == "1" }

// faultForgetRequests (IDGEN_FAULT_ORDERED_FORGET_REQUESTS=1) makes
// RememberedRequests report nothing, as before the barrier stored request
// ids again: after a lossy failover a retry of an answered request id
// gets a fresh range.
func faultForgetRequests() bool { return os.Getenv("IDGEN_FAULT_ORDERED_FORGET_REQUESTS") == "1" }

// faultLeaseMonotonicOnly (IDGEN_FAULT_LEASE_MONOTONIC_ONLY=1) checks the
// ownership lease on the monotonic clock only, as before: a VM frozen past
// its lease resumes answering although its shards were taken over.
func faultLeaseMonotonicOnly() bool { return os.Getenv("IDGEN_FAULT_LEASE_MONOTONIC_ONLY") == "1" }

// faultForgetLoaded (IDGEN_FAULT_ORDERED_FORGET_LOADED=1) keeps a loaded
// row's number out of Remembered, as before: a key this node loaded but
// never answered is not raised by its barrier flush.
func faultForgetLoaded() bool { return os.Getenv("IDGEN_FAULT_ORDERED_FORGET_LOADED") == "1" }

// faultRefuseAfterLoss (IDGEN_FAULT_ORDERED_REFUSE_AFTER_LOSS=1) refuses,
// as before issue 31's fix, numbers persisted under a term that ended
// before their answer: an aborted term fails the waiters of its persists
// in flight, and the answer check ignores that they are durable. The
// gapless business shows holes that no failed call explains.
func faultRefuseAfterLoss() bool { return os.Getenv("IDGEN_FAULT_ORDERED_REFUSE_AFTER_LOSS") == "1" }

// faultWriteBackAcrossFailover (IDGEN_FAULT_WRITEBACK_ACROSS_FAILOVER=1)
// lets a hand-off write its exact counters back although the MySQL server
// changed since its term was granted, as before the fix of simulator seed
// 1120: the write-back passes an epoch fence that lost a later owner's
// claim and lowers rows below that owner's answers.
func faultWriteBackAcrossFailover() bool {
	return os.Getenv("IDGEN_FAULT_WRITEBACK_ACROSS_FAILOVER") == "1"
}
