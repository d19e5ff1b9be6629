//go:build faultinject

package mysqlstore

import "os"

// Fault-injection hooks of the fault suite (./build.sh faults). Only builds
// with the faultinject tag contain this file.

// faultNoSessionIdleLimit is the negative control of the session limit
// (IDGEN_FAULT_NO_SESSION_IDLE_LIMIT=1, neg-fence-row-pause): the store's
// sessions keep the server's default wait_timeout, so a paused owner's
// open transaction holds its shard's fence row as long as the pause lasts.
func faultNoSessionIdleLimit() bool { return os.Getenv("IDGEN_FAULT_NO_SESSION_IDLE_LIMIT") == "1" }

// faultNoReplicaNowIsNone is the negative control of issue 29 hole f
// (IDGEN_FAULT_NO_REPLICA_NOW_IS_NONE=1): the replication verdict reads
// "0 replicas connected right now" as no replica at all (no-replica,
// safe), whatever the history and the semi-synchronous configuration say.
func faultNoReplicaNowIsNone() bool { return os.Getenv("IDGEN_FAULT_NO_REPLICA_NOW_IS_NONE") == "1" }
