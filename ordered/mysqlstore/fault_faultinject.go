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

// persistStall (IDGEN_FAULT_ORDERED_PERSIST_STALL=<file>) stalls one
// ORDERED persist of the process after its fence UPDATE, inside the open
// transaction, once the file exists and holds "<shard> <duration>": the
// fault suite writes it when it knows the hot shard and SIGSTOPs the node
// in the stall (ordered-fence-row-pause, neg-fence-row-pause).
var persistStall sync.Once

func faultAfterFence(s *Store, shard int) {
	d := stallFor(shard)
	if d <= 0 {
		return
	}
	persistStall.Do(func() {
		s.conn.Log.Warn("faultinject: persist stalled after the fence", zap.Int("shard", shard), zap.Duration("stall", d))
		time.Sleep(d)
	})
}

// faultStalls: a persist of shard would stall (so its transaction keeps
// its COMMIT out of the joined statements, for the stall to run before it).
func faultStalls(shard int) bool { return stallFor(shard) > 0 }

// stallFor is the stall IDGEN_FAULT_ORDERED_PERSIST_STALL asks of shard,
// or 0.
func stallFor(shard int) time.Duration {
	path := os.Getenv("IDGEN_FAULT_ORDERED_PERSIST_STALL")
	if path == "" {
		return 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] != strconv.Itoa(shard) {
		return 0
	}
	d, err := time.ParseDuration(f[1])
	if err != nil || d <= 0 {
		return 0
	}
	return d
}
