//go:build faultinject

package worker

import "os"

// faultNoRegistryFence is the negative control of the registry fence
// (IDGEN_FAULT_NO_REGISTRY_FENCE=1; issue 29, hole m): the node ignores a
// cluster record saying its slots are held elsewhere, so a node whose
// session expired during `idctl cluster migrate` re-claims a slot in
// ZooKeeper after the cluster moved to MySQL.
func faultNoRegistryFence() bool { return os.Getenv("IDGEN_FAULT_NO_REGISTRY_FENCE") == "1" }
