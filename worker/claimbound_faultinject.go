//go:build faultinject

package worker

import "os"

// faultConvertedClaimBound is the negative control of the claim bound's
// two readings (IDGEN_FAULT_CONVERTED_CLAIM_BOUND=1; issue 29, simulator
// seed 2052): the bound after a loss of ZooKeeper state is only converted
// to this host's clock, so a node whose clock is behind ZooKeeper's takes
// a slot whose previous holder's milliseconds it has not passed yet.
func faultConvertedClaimBound() bool { return os.Getenv("IDGEN_FAULT_CONVERTED_CLAIM_BOUND") == "1" }
