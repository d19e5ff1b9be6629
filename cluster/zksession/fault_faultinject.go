//go:build faultinject

package zksession

import "os"

// faultAnyServerBelow is the negative control of issue 29 hole g
// (IDGEN_FAULT_ZXID_ANY_SERVER=1): one serving server below the zxid this
// client saw is enough for the lost-writes rule, as before this package,
// so one lagging follower makes the node abandon its live session (and,
// without a Check, count a restore).
func faultAnyServerBelow() bool { return os.Getenv("IDGEN_FAULT_ZXID_ANY_SERVER") == "1" }
