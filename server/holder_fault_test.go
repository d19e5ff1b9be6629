package server

import (
	"testing"

	"github.com/idgen/idgen/worker"
)

// recordingHolder keeps the slot worker.LateHolder hands on.
type recordingHolder struct{ slot worker.Slot }

func (h *recordingHolder) Acquired(s worker.Slot) { h.slot = s }
func (h *recordingHolder) Extended(int64)         {}
func (h *recordingHolder) Fenced(error)           {}
func (h *recordingHolder) LastUsed() int64        { return 0 }

// TestFaultIgnoreNotBeforeOnlyInFaultInjectBuild: the fault suite's
// negative control (IDGEN_FAULT_IGNORE_NOT_BEFORE=1) zeroes a slot's
// NotBefore in faultinject builds only; a normal build ignores the variable.
func TestFaultIgnoreNotBeforeOnlyInFaultInjectBuild(t *testing.T) {
	t.Setenv("IDGEN_FAULT_IGNORE_NOT_BEFORE", "1")
	var target recordingHolder
	h := &worker.LateHolder{Fault: faultSlot}
	h.Attach(&target)
	h.Acquired(worker.Slot{Worker: 3, NotBefore: 12345, HighWater: 20000})
	want := int64(12345)
	if faultInjectBuild {
		want = 0
	}
	if target.slot.NotBefore != want || target.slot.HighWater != 20000 {
		t.Fatalf("slot after Acquired = %+v, want NotBefore %d (faultinject build: %v)", target.slot, want, faultInjectBuild)
	}
}

// TestFaultIgnoreRestoreOnlyInFaultInjectBuild: neg-restore's switch
// (IDGEN_FAULT_IGNORE_RESTORE=1) drops the cluster's restore and epoch
// bound from a slot's NotBefore in faultinject builds only.
func TestFaultIgnoreRestoreOnlyInFaultInjectBuild(t *testing.T) {
	t.Setenv("IDGEN_FAULT_IGNORE_RESTORE", "1")
	var target recordingHolder
	h := &worker.LateHolder{Fault: faultSlot}
	h.Attach(&target)
	h.Acquired(worker.Slot{Worker: 3, NotBefore: 50000, MarkNotBefore: 12345, HighWater: 60000})
	want := int64(50000)
	if faultInjectBuild {
		want = 12345
	}
	if target.slot.NotBefore != want {
		t.Fatalf("slot after Acquired = %+v, want NotBefore %d (faultinject build: %v)", target.slot, want, faultInjectBuild)
	}
}
