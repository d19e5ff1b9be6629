//go:build faultinject

package incarnation

import "os"

// faultNoCheck (IDGEN_FAULT_NO_INCARNATION_CHECK=1, the negative control
// of neg-zk-restore-fresh-first): every check passes without looking, so
// a ZooKeeper restored from a copy goes undetected again (issue 29 hole h).
func faultNoCheck() bool { return os.Getenv("IDGEN_FAULT_NO_INCARNATION_CHECK") == "1" }
