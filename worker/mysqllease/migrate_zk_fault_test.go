//go:build faultinject

package mysqllease

import (
	"os"
	"testing"
)

func faultNoRegistryFenceSet() bool { return os.Getenv("IDGEN_FAULT_NO_REGISTRY_FENCE") == "1" }

// The negative control of hole m's fix: with the registry fence switched
// off (IDGEN_FAULT_NO_REGISTRY_FENCE=1, faultinject build) the node whose
// session expired during the migration re-claims a ZooKeeper slot in a
// cluster that MySQL now holds, as the code before the fix did.
func TestIntegration_MigrateFenceControl(t *testing.T) {
	t.Setenv("IDGEN_FAULT_NO_REGISTRY_FENCE", "1")
	r := migrateWithExpiredSession(t)
	if !r.reclaimed {
		t.Fatalf("control: the node did not re-claim with the fence off (state %v, held %v)", r.state, r.held)
	}
	if len(r.held) == 0 {
		t.Fatalf("control: re-claimed, yet ZooKeeper shows no held slot")
	}
}
