//go:build faultinject

package incarnation

import "testing"

// The negative control: with IDGEN_FAULT_NO_INCARNATION_CHECK=1 the
// restore from a copy with a new node first goes undetected again, by
// the new node and by the node that ran before (hole h as it was).
func TestFaultNoIncarnationCheckReopensHoleH(t *testing.T) {
	f := newFakeZK()
	initCluster(t, f)
	w := &MemWitness{st: WitnessState{Bound: true}}
	a := newNode("a", w)
	a.check(t, f.client(false))
	snap := f.snapshot()
	a.check(t, f.client(false))
	f.restore(snap)
	t.Setenv("IDGEN_FAULT_NO_INCARNATION_CHECK", "1")
	if restored, _ := newNode("b", w).check(t, f.client(false)); restored {
		t.Fatal("the switch is set but the new node detected the restore")
	}
	if restored, _ := a.check(t, f.client(false)); restored {
		t.Fatal("the switch is set but the old node detected the restore")
	}
	t.Setenv("IDGEN_FAULT_NO_INCARNATION_CHECK", "")
	if restored, _ := newNode("c", w).check(t, f.client(false)); !restored {
		t.Fatal("without the switch the restore is detected again")
	}
}
