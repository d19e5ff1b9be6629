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
