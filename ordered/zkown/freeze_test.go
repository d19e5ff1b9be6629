package zkown

import (
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestRenewalAfterFreezeBreaksTheLease: a VM frozen past its lease
// resumes with a monotonic clock that lost the freeze; its first renewal
// is answered before the lease's end on that clock, but long after its end
// on the wall clock, where the peers counted it out and took its shards.
// The renewal must break the lease (the shards are lost), not extend it
// (the simulator's vm-freeze mix: a real-time order violation after the
// wall-clock check of the allocator alone). Negative control:
// IDGEN_FAULT_LEASE_MONOTONIC_ONLY=1.
func TestRenewalAfterFreezeBreaksTheLease(t *testing.T) {
	t.Setenv("IDGEN_FAULT_LEASE_MONOTONIC_ONLY", "1")
	control := faultLeaseMonotonicOnly()
	mono := time.Unix(1_000_000, 0)
	wall := time.Unix(2_000_000, 0)
	c := &Coordinator{cfg: Config{Lease: 300 * time.Millisecond, LeaseMargin: 20 * time.Millisecond}, log: zap.NewNop(),
		held: map[int]int64{7: 3}, kick: make(chan struct{}, 1)}
	c.validUn, c.validUnWall = mono.Add(280*time.Millisecond), wall.Add(280*time.Millisecond)
	// Sent 100 ms into the lease on both clocks; frozen for 2 s before the
	// answer: the monotonic clock shows 110 ms, the wall clock 2.11 s.
	c.extendLocked(mono.Add(100*time.Millisecond), wall.Add(100*time.Millisecond),
		mono.Add(110*time.Millisecond), wall.Add(2110*time.Millisecond), c.term)
	if control {
		if c.lapsed {
			t.Fatal("negative control: the lease broke: the switch does not reopen the hole")
		}
		return
	}
	if !c.lapsed {
		t.Fatalf("the renewal after the freeze extended the lease to %v (wall %v): it ran out on the wall clock at %v",
			c.validUn, c.validUnWall, wall.Add(280*time.Millisecond))
	}
}
