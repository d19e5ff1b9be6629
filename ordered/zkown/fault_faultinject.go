//go:build faultinject

package zkown

import "os"

// faultInjectBuild: this binary has the faultinject hooks.
const faultInjectBuild = true

// faultNoRestoreRule (IDGEN_FAULT_ORDERED_NO_RESTORE_RULE=1) is the
// negative control of the restore rule (issue 29 hole l): a wipe or
// restore the session reports is ignored, as before the fix: takeovers of
// shards ZooKeeper shows released serve at once.
func faultNoRestoreRule() bool { return os.Getenv("IDGEN_FAULT_ORDERED_NO_RESTORE_RULE") == "1" }

// faultLeaseMonotonicOnly (IDGEN_FAULT_LEASE_MONOTONIC_ONLY=1, read by
// package ordered too) ends the lease on the monotonic clock only, as
// before: a renewal after a VM freeze extends a lease the peers counted
// out.
func faultLeaseMonotonicOnly() bool { return os.Getenv("IDGEN_FAULT_LEASE_MONOTONIC_ONLY") == "1" }

// faultIgnoreStoreLease (IDGEN_FAULT_ORDERED_IGNORE_STORE_LEASE=1) is the
// negative control of the store-held lease on the taker's side: owners
// still renew in the store and extend their lease with it, but a taker
// neither waits for the shard's store nonce to stand still nor checks it
// in its claim, so an owner cut off from ZooKeeper keeps answering beside
// the node that took its shards over.
func faultIgnoreStoreLease() bool { return os.Getenv("IDGEN_FAULT_ORDERED_IGNORE_STORE_LEASE") == "1" }
