package ordered

import (
	"testing"

	"github.com/idgen/idgen/segment"
)

// The test helpers of package ordered for its external test package
// (ordered_test), whose tests run on ordered/orderedtest's store: it
// imports this package, so this package's own tests cannot import it.

// NewFakeClock is newFakeClock.
var NewFakeClock = newFakeClock

// BizMode is bizMode.
var BizMode = bizMode

// NewFakeGate is newFakeGate.
var NewFakeGate = newFakeGate

// CloseOnNextEnter makes the gate close inside its next Enter, after
// admitting it: a MySQL server change while the call runs.
func (g *fakeGate) CloseOnNextEnter() {
	g.mu.Lock()
	g.onEnter = g.close
	g.mu.Unlock()
}

// NewTestAllocator is the allocator of newNode (gate nil) or gatedNode:
// one node over store, its coordinator's lease an hour long.
func NewTestAllocator(t *testing.T, store Store, clk *fakeClock, self string, gate segment.Gate) *Allocator {
	t.Helper()
	if gate == nil {
		return newNode(t, store, clk, self).a
	}
	return gatedNode(t, store, clk, self, gate).a
}
