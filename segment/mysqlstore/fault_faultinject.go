//go:build faultinject

package mysqlstore

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Fault-injection hooks of the fault suite (./build.sh faults). Only builds
// with the faultinject tag contain this file.

// faultNoSessionIdleLimit is the negative control of the session limit
// (IDGEN_FAULT_NO_SESSION_IDLE_LIMIT=1, neg-fence-row-pause): the store's
// sessions keep the server's default wait_timeout, so a paused owner's
// open transaction holds its shard's fence row as long as the pause lasts.
func faultNoSessionIdleLimit() bool { return os.Getenv("IDGEN_FAULT_NO_SESSION_IDLE_LIMIT") == "1" }

// persistStall (IDGEN_FAULT_ORDERED_PERSIST_STALL=<file>) stalls one
// ORDERED persist of the process after its fence UPDATE, inside the open
// transaction, once the file exists and holds "<shard> <duration>": the
// fault suite writes it when it knows the hot shard and SIGSTOPs the node
// in the stall (ordered-fence-row-pause, neg-fence-row-pause).
var persistStall sync.Once

func faultAfterFence(s *Store, shard int) {
	path := os.Getenv("IDGEN_FAULT_ORDERED_PERSIST_STALL")
	if path == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] != strconv.Itoa(shard) {
		return
	}
	d, err := time.ParseDuration(f[1])
	if err != nil || d <= 0 {
		return
	}
	persistStall.Do(func() {
		s.log.Warn("faultinject: persist stalled after the fence", zap.Int("shard", shard), zap.Duration("stall", d))
		time.Sleep(d)
	})
}

// faultNoReplicaNowIsNone is the negative control of issue 29 hole f
// (IDGEN_FAULT_NO_REPLICA_NOW_IS_NONE=1): the replication verdict reads
// "0 replicas connected right now" as no replica at all (no-replica,
// safe), whatever the history and the semi-synchronous configuration say.
func faultNoReplicaNowIsNone() bool { return os.Getenv("IDGEN_FAULT_NO_REPLICA_NOW_IS_NONE") == "1" }
