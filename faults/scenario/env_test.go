package scenario

import (
	"reflect"
	"testing"
)

// setFault switches the faultinject build on and appends each switch to
// the named nodes' environment in call order: the victim's own switch
// first, then the control's switch on every node (the stall scenarios).
func TestSetFaultAppendsPerNode(t *testing.T) {
	var o ordOpts
	o.setFault("IDGEN_FAULT_A=x", 1)
	o.setFault("IDGEN_FAULT_B=1", firstNodes(3)...)
	want := map[int][]string{0: {"IDGEN_FAULT_B=1"}, 1: {"IDGEN_FAULT_A=x", "IDGEN_FAULT_B=1"}, 2: {"IDGEN_FAULT_B=1"}}
	if !o.FaultInject || !reflect.DeepEqual(o.Env, want) {
		t.Fatalf("FaultInject %v, Env %v; want true, %v", o.FaultInject, o.Env, want)
	}
}
